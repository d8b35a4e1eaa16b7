package quantity

import (
	"strings"
	"testing"
)

func TestParseTakesWhatPeopleWrite(t *testing.T) {
	for s, want := range map[string]int64{
		"64Mi": 64 << 20, "1Gi": 1 << 30, "1.5Gi": 3 << 29, "100M": 100e6, "10k": 10e3,
		"4096": 4096, "1e9": 1e9, "1E3": 1000, "5e+2": 500, "+2Ki": 2048,
		"1e999": 0, // parsed, beyond int64: Value() is not the number, callers compare (q.Cmp)
	} {
		q, err := Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
			continue
		}
		if want != 0 && q.Value() != want {
			t.Errorf("Parse(%q) = %d, want %d", s, q.Value(), want)
		}
	}
}

// The text that makes resource.ParseQuantity take a minute is refused before it is parsed, and
// so is any text longer than a size written by hand.
func TestParseRefusesWhatIsSlowToParse(t *testing.T) {
	for _, s := range []string{
		"1e-99999999", "1E9999", "1e+1000", "1e-0001",
		strings.Repeat("9", 33), "0." + strings.Repeat("0", 40) + "1",
	} {
		if q, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, q.String())
		}
	}
}

func TestParseRefusesWhatResourceRefuses(t *testing.T) {
	for _, s := range []string{"", "1Q", "1e-99Ki", "one", "1 Gi"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q): want an error", s)
		}
	}
}
