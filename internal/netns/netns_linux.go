//go:build linux

// Package netns runs code inside another network namespace. A socket belongs to the namespace
// of the thread that creates it, so the code runs on a goroutine locked to its OS thread that
// enters the namespace with setns(2) and returns to its own afterwards; sockets made inside
// keep working from any thread. No process is forked (no nsenter). Needs CAP_SYS_ADMIN.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do calls fn in the network namespace ns (an open /proc/PID/ns/net or a bind mount of one)
// and waits for it. It fails, without calling fn, when the namespace cannot be entered. Should
// the return to the thread's own namespace fail, the thread stays locked and the Go runtime
// ends it with the goroutine instead of reusing a thread that lives in the pod's namespace.
func Do(ns *os.File, fn func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := doOnThisThread(ns, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// doOnThisThread does Do's work on a locked thread; restored reports whether the thread is
// back in its own namespace.
func doOnThisThread(ns *os.File, fn func()) (err error, restored bool) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return fmt.Errorf("network namespace of this thread: %w", err), true
	}
	defer self.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the pod's network namespace: %w", err), true
	}
	fn()
	return nil, unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
}
