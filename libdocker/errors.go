package libdocker

import (
	"errors"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
)

// ErrUnknownRuntime is returned when Docker does not know the requested HostConfig.Runtime.
var ErrUnknownRuntime = errors.New("unknown Docker runtime")

// ErrRuntimeFailed is returned when Docker knows the runtime but could not run the container
// with it (binary missing, not executable, a directory, shim not installed).
var ErrRuntimeFailed = errors.New("OCI runtime failed")

// IsNotFound reports whether Docker said the object does not exist.
func IsNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// IsConflict reports whether Docker refused the call because of the object's state or a name clash.
func IsConflict(err error) bool { return cerrdefs.IsConflict(err) }

// classify tags Docker errors that carry no type of their own. Docker 20.10 answers an unknown
// runtime with a plain "invalid parameter" and a runtime exec failure with a 500, so their text is
// the only signal; this is the one place that reads it.
func classify(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Unknown runtime specified"), strings.Contains(msg, "unknown or invalid runtime name"):
		return classified{err: err, kind: ErrUnknownRuntime}
	case strings.Contains(msg, "OCI runtime create failed"), strings.Contains(msg, "OCI runtime start failed"),
		strings.Contains(msg, "failed to create shim"), strings.Contains(msg, "failed to start shim"):
		return classified{err: err, kind: ErrRuntimeFailed}
	}
	return err
}

// classified adds a kind to Docker's error without changing its text.
type classified struct {
	err  error
	kind error
}

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return []error{c.kind, c.err} }
