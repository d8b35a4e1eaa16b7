package podcidr

import (
	"net"
	"strings"
	"testing"
)

// FuzzParsePodCIDRs: Parse never panics, and what it accepts is one or two CIDRs, each
// a valid CIDR taken from the input, of different IP families.
func FuzzParsePodCIDRs(f *testing.F) {
	f.Add("10.244.0.0/24")
	f.Add("10.244.0.0/24,fd00:10:244::/64")
	f.Add(" 10.244.0.0/24 , ,fd00::/64,")
	f.Add("10.0.0.0/8,10.1.0.0/16")
	f.Add("::ffff:10.0.0.0/104,10.0.0.0/8")
	f.Add("a,b,c")
	f.Add("")
	f.Fuzz(func(t *testing.T, value string) {
		cidrs, err := Parse(value)
		if err != nil {
			if cidrs != nil {
				t.Fatalf("%q: error %v with CIDRs %q", value, err, cidrs)
			}
			return
		}
		if len(cidrs) < 1 || len(cidrs) > 2 {
			t.Fatalf("%q: accepted %d CIDRs", value, len(cidrs))
		}
		v4 := map[bool]bool{}
		for _, c := range cidrs {
			ip, _, err := net.ParseCIDR(c)
			if err != nil || c != strings.TrimSpace(c) || strings.Contains(c, ",") || !strings.Contains(value, c) {
				t.Fatalf("%q: accepted %q (%v)", value, c, err)
			}
			if v4[ip.To4() != nil] {
				t.Fatalf("%q: accepted two CIDRs of one family: %q", value, cidrs)
			}
			v4[ip.To4() != nil] = true
		}
	})
}
