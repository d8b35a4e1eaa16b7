//go:build !linux

package network

import "errors"

// NetNSPins keeps network namespaces alive; network namespaces exist on Linux only.
type NetNSPins struct{}

// NewNetNSPins returns pins that cannot pin.
func NewNetNSPins(string) *NetNSPins { return &NetNSPins{} }

// Pin fails: there are no network namespaces to pin.
func (p *NetNSPins) Pin(string, int) (string, error) {
	return "", errors.New("network namespaces exist on Linux only")
}

// Path is always "".
func (p *NetNSPins) Path(string) string { return "" }

// Unpin has nothing to release.
func (p *NetNSPins) Unpin(string) error { return nil }
