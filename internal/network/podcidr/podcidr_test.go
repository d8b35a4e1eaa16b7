package podcidr

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: refused
	}{
		{"10.244.0.0/16", []string{"10.244.0.0/16"}},
		{"10.244.0.0/16, fd00:10:244::/56", []string{"10.244.0.0/16", "fd00:10:244::/56"}},
		{"fd00::/64,10.0.0.0/8,", []string{"fd00::/64", "10.0.0.0/8"}},
		{"", nil},
		{" , ", nil},
		{"10.244.0.0", nil},
		{"10.244.0.0/33", nil},
		{"10.0.0.0/8,10.1.0.0/16", nil},
		{"fd00::/64,fd01::/64", nil},
		{"10.0.0.0/8,fd00::/64,fd01::/64", nil},
		{strings.Repeat("1", 10000), nil},
	} {
		got, err := Parse(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("Parse(%.40q) = %v, want an error", tc.in, got)
			} else if len(err.Error()) > 200 {
				t.Errorf("Parse(%.40q): error of %d bytes", tc.in, len(err.Error()))
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// A value of exactly the length kept is quoted whole.
func TestTruncateKeepsAValueOfTheLengthKept(t *testing.T) {
	if got := truncate(strings.Repeat("x", 64), 64); got != strings.Repeat("x", 64) {
		t.Errorf("truncate of 64 bytes to 64 = %q", got)
	}
	if got := truncate(strings.Repeat("x", 65), 64); got != strings.Repeat("x", 64)+"..." {
		t.Errorf("truncate of 65 bytes to 64 = %q", got)
	}
}
