//go:build linux

package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// NetNSPins keeps the network namespaces of sandboxes alive in files of one directory (bind
// mounts of /proc/PID/ns/net), as containerd pins the namespaces it makes. A sandbox container
// that dies or is removed by hand takes its namespace with it; the pin keeps it until the CNI
// DEL, which then finds the pod's interface and its addresses (the bridge plugin cleans its
// masquerade rules only from inside the namespace).
type NetNSPins struct {
	dir string
}

// NewNetNSPins pins into dir, which is made on the first pin.
func NewNetNSPins(dir string) *NetNSPins { return &NetNSPins{dir: dir} }

func (p *NetNSPins) file(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return "", fmt.Errorf("pin network namespace: bad sandbox id %q", id)
	}
	return filepath.Join(p.dir, id), nil
}

// Pin bind-mounts the network namespace of process pid to a file named after sandbox id, and
// returns the file's path.
func (p *NetNSPins) Pin(id string, pid int) (string, error) {
	path, err := p.file(id)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return "", fmt.Errorf("pin network namespace: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return "", fmt.Errorf("pin network namespace: %w", err)
	}
	f.Close()
	src := fmt.Sprintf("/proc/%d/ns/net", pid)
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("pin network namespace: bind-mount %s on %s: %w", src, path, err)
	}
	return path, nil
}

// Path is the pinned namespace of sandbox id; "" when there is no live pin (none was made, it
// was removed, or the mount did not survive, e.g. a reboot left an empty file).
func (p *NetNSPins) Path(id string) string {
	path, err := p.file(id)
	if err != nil {
		return ""
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		return ""
	}
	return path
}

// Unpin releases the pin of sandbox id (the namespace goes away with its last user); a
// missing pin is fine.
func (p *NetNSPins) Unpin(id string) error {
	path, err := p.file(id)
	if err != nil {
		return err
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unpin network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin network namespace: %w", err)
	}
	return nil
}
