package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// socketMode is the CRI socket's: root and group docker may connect, as with upstream's unit.
const socketMode = 0o660

// listenUnix listens on path with mode 0660 (group docker when it exists, as upstream's socket
// unit does). A stale socket file left by a crash is replaced; a live one is an error, so that
// two daemons never fight over one socket; anything else at path, a symbolic link included, is
// refused and left alone.
func listenUnix(path string) (net.Listener, error) {
	return listenUnixRacing(path, nil)
}

// listenUnixRacing is listenUnix that calls bound, when set, after the socket is bound and given
// its mode and group, and before it takes path: tests race it there.
//
// The socket is bound in a directory of our own beside path (0700: nobody else can reach or
// swap what is in it), given its mode and group there, then hard-linked to path. Not a umask
// around a bind on path: the umask is the whole process's, and goroutines creating files
// meanwhile would get ours. Not chmod and chown through path: they would follow a link put
// there after the bind (and fchmod on a socket's descriptor does not reach its file). link(2)
// follows no link and replaces nothing: whatever appears at path after the check (a link,
// another daemon's socket) makes it fail, as a bind on path would, and is left alone.
func listenUnixRacing(path string, bound func()) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := clearSocketPath(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, ".cri-dockerd-")
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s (bound first as %s): %w", path, tmp, err)
	}
	// The file's name is path once linked, which serve removes at shutdown.
	lis.SetUnlinkOnClose(false)
	if err := setModeAndGroup(tmp); err != nil {
		lis.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if bound != nil {
		bound()
	}
	if err := os.Link(tmp, path); err != nil {
		lis.Close()
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s appeared while cri-dockerd bound its socket (another cri-dockerd starting?); it is left alone", path)
		}
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return movedListener{lis, &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// clearSocketPath makes path free for the socket: nothing there, or a stale socket, which it
// removes. Anything else it refuses, saying what to do.
func clearSocketPath(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("socket %s: %w", path, err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, which cri-dockerd does not follow at its socket's path; remove it or choose another --container-runtime-endpoint", path)
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket; remove it or choose another --container-runtime-endpoint", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("%s is in use by another process (another cri-dockerd?)", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// setModeAndGroup gives the socket file at path (in our own directory, so no link is there to
// follow) mode 0660 and group docker when it exists. Not being allowed to change the group (not
// root) is not an error.
func setModeAndGroup(path string) error {
	if err := os.Chmod(path, socketMode); err != nil {
		return err
	}
	g, err := user.LookupGroup("docker")
	if err != nil {
		return nil
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return nil
	}
	if err := os.Lchown(path, -1, gid); err != nil && !errors.Is(err, os.ErrPermission) {
		return err
	}
	return nil
}

// movedListener is a listener whose socket file was bound under another name: Addr is its path.
type movedListener struct {
	*net.UnixListener
	addr net.Addr
}

func (l movedListener) Addr() net.Addr { return l.addr }
