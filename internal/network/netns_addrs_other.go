//go:build !linux

package network

import "errors"

// NamespaceIPs fails: network namespaces exist on Linux only.
func NamespaceIPs(string, string) ([]string, error) {
	return nil, errors.New("network namespaces exist on Linux only")
}
