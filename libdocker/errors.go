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

// ErrSubpathNotFound is returned when Docker cannot find (or access) a mount's sub path in what
// it mounts: Docker 28+ checks an image mount's ImageOptions.Subpath only when it sets up the
// container's mounts (at start, or for the archive API), never at create.
var ErrSubpathNotFound = errors.New("mount sub path not found")

// ErrSubpathInvalid is returned when Docker refuses a mount's sub path that leads out of what it
// mounts, or goes through something that is not a directory.
var ErrSubpathInvalid = errors.New("invalid mount sub path")

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
