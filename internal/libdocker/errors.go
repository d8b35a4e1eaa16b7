package libdocker

import (
	"errors"
	"net"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	dockerclient "github.com/docker/docker/client"
)

// ErrUnavailable is returned when Docker cannot be reached (its socket refuses or is gone, the
// dial times out): the call may succeed once dockerd is back, so clients should retry.
var ErrUnavailable = errors.New("Docker is unreachable")

// ErrUnknownRuntime is returned when Docker does not know the requested HostConfig.Runtime.
var ErrUnknownRuntime = errors.New("unknown Docker runtime")

// ErrRuntimeFailed is returned when Docker knows the runtime but could not run the container
// with it (binary missing, not executable, a directory, shim not installed).
var ErrRuntimeFailed = errors.New("OCI runtime failed")

// ErrSubpathNotFound is returned when Docker cannot find (or access) a mount's sub path in what
// it mounts: Docker 28+ checks an image mount's ImageOptions.Subpath only when it sets up the
// container's mounts (at start, or for the archive API), never at create.
var ErrSubpathNotFound = errors.New("mount sub path not found")

// ErrSubpathInvalid is returned when Docker refuses a mount's sub path that leads out of what it
// mounts, or goes through something that is not a directory.
var ErrSubpathInvalid = errors.New("invalid mount sub path")

// IsNotFound reports whether Docker said the object does not exist.
func IsNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// IsUnavailable reports whether Docker could not be reached, or said it cannot serve now.
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || cerrdefs.IsUnavailable(err)
}

// IsConflict reports whether Docker refused the call because of the object's state or a name clash.
func IsConflict(err error) bool { return cerrdefs.IsConflict(err) }

// classify tags Docker errors that carry no errdefs kind: a failed connection (typed by the
// client), and errors whose text is the only signal. Docker 20.10 answers an unknown runtime with
// a plain "invalid parameter" and a runtime exec failure with a 500; this is the one place that
// reads Docker's text.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	// The client types a failed connection for its plain HTTP calls; the hijacked ones (attach,
	// exec) only wrap the dialer's *net.OpError.
	var op *net.OpError
	if dockerclient.IsErrConnectionFailed(err) || (errors.As(err, &op) && op.Op == "dial") {
		return classified{err: err, kind: ErrUnavailable}
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Unknown runtime specified"), strings.Contains(msg, "unknown or invalid runtime name"):
		return classified{err: err, kind: ErrUnknownRuntime}
	case strings.Contains(msg, "OCI runtime create failed"), strings.Contains(msg, "OCI runtime start failed"),
		strings.Contains(msg, "failed to create shim"), strings.Contains(msg, "failed to start shim"):
		return classified{err: err, kind: ErrRuntimeFailed}
	// Docker's safepath.Join (volume and image sub paths): a 404 at start, a 500 from the
	// archive API, for a missing path; a path that escapes or crosses a file is a 400 or a 500.
	case strings.Contains(msg, "cannot access path "):
		return classified{err: err, kind: ErrSubpathNotFound}
	case strings.Contains(msg, "path concatenation escapes the base directory"),
		strings.Contains(msg, "error while resolving symlinks in combined path"):
		return classified{err: err, kind: ErrSubpathInvalid}
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
