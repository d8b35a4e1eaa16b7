package main

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// umask reads the process's umask (setting it back at once).
func umask() int {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return old
}

// withUmask runs the test under a known umask, restored at its end.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// fileState is what a chmod or chown through a link would change.
type fileState struct {
	mode os.FileMode
	gid  uint32
}

func (s fileState) String() string { return fmt.Sprintf("mode %v group %d", s.mode, s.gid) }

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid}
}

// checkServed checks that path is our socket: mode 0660, group docker where we may set it,
// answering connections, and the only entry its listenUnix left in the directory.
func checkServed(t *testing.T, lis net.Listener, path string) {
	t.Helper()
	st := stateOf(t, path)
	if st.mode&os.ModeSocket == 0 || st.mode.Perm() != 0o660 {
		t.Errorf("%s has mode %v, want a socket with 0660", path, st.mode)
	}
	if g, err := user.LookupGroup("docker"); err == nil && os.Geteuid() == 0 {
		if gid, _ := strconv.Atoi(g.Gid); st.gid != uint32(gid) {
			t.Errorf("%s has group %d, want docker's %d", path, st.gid, gid)
		}
	}
	if lis.Addr().String() != path {
		t.Errorf("the listener's address is %s, want %s", lis.Addr(), path)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to %s: %v", path, err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Errorf("accept: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".cri-dockerd-") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}

// The socket gets its mode and group without a change of the process's umask, which other
// goroutines' files depend on: the umask is the same once the socket is bound and moded, and
// after.
func TestListenUnixLeavesTheUmaskAlone(t *testing.T) {
	withUmask(t, 0o022)
	path := filepath.Join(t.TempDir(), "cri.sock")
	during := -1
	lis, err := listenUnixRacing(path, func() { during = umask() })
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if during != 0o022 || umask() != 0o022 {
		t.Errorf("umask %#o while listening and %#o after, want 022 throughout", during, umask())
	}
	checkServed(t, lis, path)
}

// preciousFile is a file a link at the socket's path may point to, in a new directory, and its
// mode and group now.
func preciousFile(t *testing.T) (dir, path string, st fileState) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "precious")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path, stateOf(t, path)
}

// A symbolic link at the socket's path is refused and left alone; its target keeps its mode
// and group.
func TestListenUnixRefusesASymlinkAtItsPath(t *testing.T) {
	dir, target, before := preciousFile(t)
	path := filepath.Join(dir, "cri.sock")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	lis, err := listenUnix(path)
	if err == nil {
		lis.Close()
		t.Fatal("listenUnix served on a symbolic link")
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("error %q does not say the path is a symbolic link", err)
	}
	if after := stateOf(t, target); after != before {
		t.Errorf("the link's target changed from %v to %v", before, after)
	}
	if st := stateOf(t, path); st.mode&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by %v", st.mode)
	}
}

// A symbolic link put at the socket's path while we listen (after the path was checked) makes
// the listen fail, and is neither followed nor replaced: its target keeps its mode and group.
func TestListenUnixDoesNotFollowASymlinkPutAtItsPathMeanwhile(t *testing.T) {
	dir, target, before := preciousFile(t)
	path := filepath.Join(dir, "cri.sock")
	lis, err := listenUnixRacing(path, func() {
		_ = os.Remove(path)
		if err := os.Symlink(target, path); err != nil {
			t.Error(err)
		}
	})
	if err == nil {
		lis.Close()
		t.Error("listenUnix served on a symbolic link put at its path")
	} else if !strings.Contains(err.Error(), "appeared while cri-dockerd bound its socket") {
		t.Errorf("error %q does not say something appeared at the path", err)
	}
	if after := stateOf(t, target); after != before {
		t.Errorf("the link's target changed from %v to %v", before, after)
	}
	if st := stateOf(t, path); st.mode&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by %v", st.mode)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the directory holds %v, want the file and the link alone", entries)
	}
}

// A socket left by a crash is replaced; a live one, or anything but a socket, is refused.
func TestListenUnixReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	lis, err := listenUnix(stale)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	checkServed(t, lis, stale)

	if l, err := listenUnix(stale); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		if l != nil {
			l.Close()
		}
		t.Errorf("over a live socket: %v, want it refused", err)
	}
	lis.Close()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := listenUnix(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		if l != nil {
			l.Close()
		}
		t.Errorf("over a file: %v, want it refused", err)
	}
}
