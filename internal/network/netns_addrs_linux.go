//go:build linux

package network

import (
	"fmt"
	"net"
	"os"

	"github.com/cri-dockerd/cri-dockerd/internal/netns"
)

// NamespaceIPs reads the global unicast addresses of interface ifName in the network namespace
// at nsPath (e.g. /proc/PID/ns/net), IPv4 first, as dockershim and upstream cri-dockerd read a
// pod's IPs (they ran `nsenter ... ip addr show dev eth0 scope global`). The kernel is asked
// over netlink from inside the namespace (netns.Do): a socket belongs to the namespace of the
// thread that creates it.
func NamespaceIPs(nsPath, ifName string) (ips []string, err error) {
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	if nsErr := netns.Do(ns, func() { ips, err = interfaceIPs(ifName) }); nsErr != nil {
		return nil, nsErr
	}
	return ips, err
}

// interfaceIPs lists ifName's global unicast addresses in the calling thread's namespace.
func interfaceIPs(ifName string) ([]string, error) {
	iface, err := net.InterfaceByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifName, err)
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", ifName, err)
	}
	return globalIPs(addrs), nil
}
