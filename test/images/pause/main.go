// Command pause is the pod sandbox ("infra") process of cri-dockerd's test pause image.
//
// It holds the pod's namespaces open, reaps zombies of processes that get reparented to it
// (it is PID 1 when the pod shares its PID namespace), and exits 0 on SIGTERM or SIGINT so that
// stopping a sandbox is quick rather than waiting out Docker's kill timeout. As PID 1 the
// kernel ignores signals it has no handler for, which is why both are handled explicitly.
//
// Build it statically: CGO_ENABLED=0 go build -ldflags '-s -w'.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause (cri-dockerd test image)")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	reap() // children inherited before the handler was installed
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			os.Exit(0)
		}
	}
}

// reap collects every exited child. Signals coalesce, so one SIGCHLD may stand for many exits:
// loop until wait4 reports no more (0) or no children at all (ECHILD).
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
