// Package fswalk walks a directory tree that someone else writes while we walk it: a running
// container's writable layer, whose every entry the pod owns. Between a look at an entry and a
// read, a process of the pod can swap a file for a symlink to the host's /etc/shadow, a
// directory for a symlink to /, or a file for a device node it made (Docker grants CAP_MKNOD).
// So the walk never resolves a path: each entry is looked at beneath its parent's descriptor
// without following it (fstatat AT_SYMLINK_NOFOLLOW), a directory is descended through a
// descriptor opened O_NOFOLLOW|O_DIRECTORY, and a file is read only through an O_PATH
// descriptor of the inode that was looked at (which follows no symlink and opens no device).
package fswalk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxDepth bounds the directories a walk descends (each holds a descriptor while its entries
// are walked): a container can nest directories beyond PATH_MAX.
const MaxDepth = 512

// ErrTooDeep is the error of a tree nested deeper than MaxDepth.
var ErrTooDeep = errors.New("directories nested too deep")

// ErrChanged is the error of an entry that is no longer what the walk looked at.
var ErrChanged = errors.New("changed while walked")

// Entry is one entry of the tree, valid during the call that gets it.
type Entry struct {
	// Rel is its path below the root, slash-separated, without a leading slash.
	Rel  string
	Stat unix.Stat_t
	dir  int // the parent directory's descriptor
	name string
}

// Open opens the regular file the entry's name holds, for reading, and sets Stat to it: the
// one looked at, or the one a rename put there since (a container replacing its files
// atomically). It opens an O_PATH descriptor of what the name holds, follows no symlink and
// opens no device, and reads only a regular file, through that descriptor's /proc link.
// Anything else there now is ErrChanged.
func (e *Entry) Open() (*os.File, error) {
	fd, err := unix.Openat(e.dir, e.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("/%s: %w", e.Rel, ErrChanged)
	}
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", e.Rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("/%s: %w", e.Rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("/%s: %w", e.Rel, ErrChanged)
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	e.Stat = st
	return f, nil
}

// Readlink reads the symlink the entry's name holds (readlinkat follows nothing: if the name
// no longer holds a symlink, it fails).
func (e *Entry) Readlink() (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(e.dir, e.name, buf)
	if err != nil {
		return "", fmt.Errorf("/%s: %w", e.Rel, err)
	}
	return string(buf[:n]), nil
}

// Walk calls fn for each entry under root (not root itself), a directory before what it
// holds. An entry removed during the walk is skipped; ctx ends the walk.
func Walk(ctx context.Context, root string, fn func(*Entry) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	return walkDir(ctx, fd, "", 0, fn)
}

// walkDir walks the directory open as fd, whose path below the root is rel, and closes fd.
func walkDir(ctx context.Context, fd int, rel string, depth int, fn func(*Entry) error) error {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if depth > MaxDepth {
		return fmt.Errorf("/%s: %w (more than %d)", rel, ErrTooDeep, MaxDepth)
	}
	for {
		// In batches: a directory of millions of entries is never all in memory.
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := walkEntry(ctx, int(f.Fd()), name, path.Join(rel, name), depth, fn); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	}
}

// walkEntry looks at the entry name of the directory dirfd, whose path below the root is rel,
// calls fn and descends a directory.
func walkEntry(ctx context.Context, dirfd int, name, rel string, depth int, fn func(*Entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := &Entry{Rel: rel, dir: dirfd, name: name}
	err := unix.Fstatat(dirfd, name, &e.Stat, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed while we walk
	}
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	if e.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fn(e)
	}
	sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil // removed or swapped for what is not a directory while we walk
	}
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	// What we descend is what fn hears of: the directory this descriptor holds.
	if err := unix.Fstat(sub, &e.Stat); err != nil {
		unix.Close(sub)
		return fmt.Errorf("/%s: %w", rel, err)
	}
	if err := fn(e); err != nil {
		unix.Close(sub)
		return err
	}
	return walkDir(ctx, sub, rel, depth+1, fn)
}
