package libdocker

import (
	"fmt"
	"net"
	"os"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
)

// daemonError carries Docker's exact text (as the client prints it) and an errdefs kind.
type daemonError struct {
	msg  string
	kind error
}

func (e *daemonError) Error() string { return "Error response from daemon: " + e.msg }
func (e *daemonError) Unwrap() error { return e.kind }

func dErr(kind error, format string, args ...any) error {
	return &daemonError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// ConnectionFailed is the error of a call while dockerd is down, for InjectError: the real
// client's text over the dialer's *net.OpError, which is what a hijacked call (attach, exec)
// carries; libdocker's tests check that the real client's errors classify the same.
func ConnectionFailed(host string) error {
	return &connectionFailed{host: host, err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
}

type connectionFailed struct {
	host string
	err  error
}

func (e *connectionFailed) Error() string {
	return "Cannot connect to the Docker daemon at " + e.host + ". Is the docker daemon running?"
}
func (e *connectionFailed) Unwrap() error { return e.err }

func notFound(object, ref string) error {
	return dErr(cerrdefs.ErrNotFound, "No such %s: %s", object, ref)
}
