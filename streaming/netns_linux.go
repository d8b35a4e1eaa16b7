//go:build linux

package streaming

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// openNetNS opens the network namespace of process pid.
func openNetNS(pid int) (*os.File, error) {
	return os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
}

// dialInNetNS connects to port on the loopback of network namespace ns. A socket belongs to the
// namespace of the thread that creates it, so a goroutine locked to its OS thread enters ns
// with setns(2), dials (net.Dialer creates and connects the socket on the calling goroutine,
// whose parked waits resume on the same locked thread), and returns to its own namespace. The
// connection keeps working from any thread afterwards. Should the return fail, the thread stays
// locked, and the Go runtime ends it with the goroutine instead of reusing a thread that lives
// in the pod's namespace. Needs CAP_SYS_ADMIN, which cri-dockerd has as Docker's peer.
func dialInNetNS(ctx context.Context, ns *os.File, port int32) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, err, restored := dialOnThisThread(ctx, ns, port)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}

// dialOnThisThread does dialInNetNS's work on a locked thread; restored reports whether the
// thread is back in its own namespace.
func dialOnThisThread(ctx context.Context, ns *os.File, port int32) (conn net.Conn, err error, restored bool) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, fmt.Errorf("network namespace of this thread: %w", err), true
	}
	defer self.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter the pod's network namespace: %w", err), true
	}
	conn, err = dialLoopback(ctx, port)
	if errBack := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); errBack != nil {
		return conn, err, false
	}
	return conn, err, true
}
