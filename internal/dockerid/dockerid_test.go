package dockerid

import (
	"strings"
	"testing"
)

func TestIsFull(t *testing.T) {
	full := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{full, true},
		{full[:12], false},
		{full + "0", false},
		{strings.ToUpper(full), false},
		{strings.Repeat("g", 64), false},
		{"", false},
	} {
		if got := IsFull(tc.id); got != tc.want {
			t.Errorf("IsFull(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
