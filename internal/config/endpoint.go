package config

import (
	"fmt"
	"strings"
)

// Endpoint is a parsed --container-runtime-endpoint.
type Endpoint struct {
	// Path is the unix socket's path; empty for fd://.
	Path string
	// Activated is fd:// (or fd://NAME): serve a socket that systemd passes.
	Activated bool
	// FDName is NAME of fd://NAME, matched against systemd's FileDescriptorName=.
	FDName string
	// Bare is set when the endpoint was a path without unix://, which upstream accepts
	// (deprecated) and so do we.
	Bare bool
}

// ParseEndpoint reads a CRI endpoint as upstream cri-dockerd does on Linux: unix://PATH, a bare
// absolute PATH, or fd:// for socket activation. Upstream refuses tcp:// on Linux ("only
// support unix socket endpoint"), and so do we, with the reason.
func ParseEndpoint(endpoint string) (Endpoint, error) {
	scheme, rest, hasScheme := strings.Cut(endpoint, "://")
	if !hasScheme {
		if strings.HasPrefix(endpoint, "/") {
			return Endpoint{Path: endpoint, Bare: true}, nil
		}
		return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: want unix:///PATH (e.g. %s), or fd:// for the socket systemd passes", endpoint, DefaultCRIEndpoint)
	}
	switch scheme {
	case "unix":
		if rest == "" {
			return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: empty socket path", endpoint)
		}
		if !strings.HasPrefix(rest, "/") {
			return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: the socket path must be absolute, e.g. unix:///var/run/cri-dockerd.sock", endpoint)
		}
		return Endpoint{Path: rest}, nil
	case "fd":
		if strings.Contains(rest, "/") {
			return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: want fd:// or fd://NAME (a FileDescriptorName= of the socket unit)", endpoint)
		}
		return Endpoint{Activated: true, FDName: rest}, nil
	case "tcp":
		return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: tcp endpoints are not served on Linux (upstream cri-dockerd refuses them too: the CRI has no authentication, so a TCP port would hand the node to anyone who reaches it); use unix:///var/run/cri-dockerd.sock or fd://", endpoint)
	default:
		return Endpoint{}, fmt.Errorf("--container-runtime-endpoint %q: scheme %q is not supported on Linux; want unix:///PATH or fd://", endpoint, scheme)
	}
}
