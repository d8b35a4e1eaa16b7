// Package podcidr parses a pod CIDR, as the kubelet and --pod-cidr give it. It is a leaf of its
// own so that config checks the flag without importing network.
package podcidr

import (
	"fmt"
	"net"
	"strings"
)

// Parse splits a pod CIDR as the kubelet (UpdateRuntimeConfig) and --pod-cidr give it: one
// CIDR, or an IPv4 and an IPv6 one separated by a comma for dual stack. Empty entries are skipped.
// It is the one check of both sources, so that a value refused on the command line is refused
// over the socket too, and nothing unchecked is saved in the root directory.
func Parse(value string) ([]string, error) {
	var cidrs []string
	families := map[bool]string{}
	for _, one := range strings.Split(value, ",") {
		one = strings.TrimSpace(one)
		if one == "" {
			continue
		}
		if len(cidrs) == 2 {
			return nil, fmt.Errorf("at most two CIDRs (one per IP family), got more")
		}
		ip, _, err := net.ParseCIDR(one)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR, e.g. 10.244.0.0/24 or 10.244.0.0/24,fd00:10:244::/64", truncate(one, 64))
		}
		v4 := ip.To4() != nil
		if other, dup := families[v4]; dup {
			return nil, fmt.Errorf("%q and %q are of the same IP family: give at most one IPv4 and one IPv6 CIDR", other, one)
		}
		families[v4] = one
		cidrs = append(cidrs, one)
	}
	if len(cidrs) == 0 {
		return nil, fmt.Errorf("no CIDR given")
	}
	return cidrs, nil
}

// truncate keeps an error message readable when the caller sent a huge value.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
