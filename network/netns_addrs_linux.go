//go:build linux

package network

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// NamespaceIPs reads the global unicast addresses of interface ifName in the network namespace
// at nsPath (e.g. /proc/PID/ns/net), IPv4 first, as dockershim and upstream cri-dockerd read a
// pod's IPs (they ran `nsenter ... ip addr show dev eth0 scope global`). No process is forked:
// a goroutine locked to its OS thread enters the namespace with setns(2), asks the kernel over
// netlink (a socket belongs to the namespace of the thread that creates it), and returns. Should
// the return fail, the thread stays locked and the Go runtime ends it with the goroutine.
func NamespaceIPs(nsPath, ifName string) ([]string, error) {
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	type result struct {
		ips []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ips, err, restored := namespaceIPsOnThisThread(ns, ifName)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{ips, err}
	}()
	res := <-done
	return res.ips, res.err
}

func namespaceIPsOnThisThread(ns *os.File, ifName string) (ips []string, err error, restored bool) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, fmt.Errorf("network namespace of this thread: %w", err), true
	}
	defer self.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter the pod's network namespace: %w", err), true
	}
	ips, err = interfaceIPs(ifName)
	if errBack := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); errBack != nil {
		return ips, err, false
	}
	return ips, err, true
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
