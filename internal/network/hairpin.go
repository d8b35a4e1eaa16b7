package network

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnableHairpin turns on hairpin mode for the bridge port that is the host end of a container's
// eth0 veth, so the pod reaches itself through a host port or a service IP (the kubelet's
// --hairpin-mode=hairpin-veth did this for Docker's bridge). sysRoot is "/" on a node. The
// container's own sysfs (Docker mounts one in its network namespace) gives the peer's ifindex.
func EnableHairpin(sysRoot string, pid int) error {
	iflink := filepath.Join(sysRoot, "proc", strconv.Itoa(pid), "root", "sys", "class", "net", "eth0", "iflink")
	raw, err := os.ReadFile(iflink)
	if err != nil {
		return fmt.Errorf("hairpin: the pod's eth0 peer: %w", err)
	}
	peer := strings.TrimSpace(string(raw))
	hostNet := filepath.Join(sysRoot, "sys", "class", "net")
	links, err := os.ReadDir(hostNet)
	if err != nil {
		return fmt.Errorf("hairpin: %w", err)
	}
	for _, l := range links {
		idx, err := os.ReadFile(filepath.Join(hostNet, l.Name(), "ifindex"))
		if err != nil || strings.TrimSpace(string(idx)) != peer {
			continue
		}
		mode := filepath.Join(hostNet, l.Name(), "brport", "hairpin_mode")
		if err := os.WriteFile(mode, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("hairpin: %s is not a bridge port or cannot be set: %w", l.Name(), err)
		}
		return nil
	}
	return fmt.Errorf("hairpin: no host interface has ifindex %s (the pod's eth0 peer)", peer)
}
