package checkpointarchive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The container keeps running while we read its upper directory, and whoever runs in it owns
// every entry there: between our look at an entry and our read, a process of the pod can swap a
// file for a symlink to the host's /etc/shadow, a directory for a symlink to /, or a file for a
// device node it made (Docker grants CAP_MKNOD). So the walk never resolves a path: each entry
// is opened beneath its parent's descriptor with O_PATH|O_NOFOLLOW, which neither follows a
// symlink nor opens a device, and what we record and read is the inode that descriptor holds.
// Only a regular file is ever opened for reading, through that descriptor.

// maxDepth bounds the walk's directories (each holds a descriptor while its entries are
// walked): a container can nest directories beyond PATH_MAX, which the walk does not need.
const maxDepth = 512

// maxHoles bounds the bytes of holes the diff may write: tar has no holes, so a sparse file of
// 1 TiB that occupies 4 KiB on the node's disk would become 1 TiB in the archive. Beyond it the
// checkpoint fails naming the file: the archive never grows much past what the container's
// writable layer occupies.
const maxHoles = 64 << 20

// ErrSparse is the error of a diff whose sparse files exceed maxHoles.
var ErrSparse = errors.New("sparse files")

// afterStat runs between an entry's stat and its read: tests swap the entry there.
var afterStat = func(rel string) {}

// diffWalk writes one upper directory's tar.
type diffWalk struct {
	ctx     context.Context
	tw      *tar.Writer
	deleted []string
	holes   int64
	// links names the first entry of each inode with more than one link: the next ones are
	// hard links in the tar, not copies (100 links to a 1 GiB file are 1 GiB, not 100).
	links map[[2]uint64]string
	buf   []byte
}

// writeRootfsDiff writes a tar of what the upper directory holds to w, and returns the paths it
// deletes: overlayfs marks a deleted file with a whiteout, a character device 0:0.
func writeRootfsDiff(ctx context.Context, upper string, w io.Writer) ([]string, error) {
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: upper, Err: err}
	}
	d := &diffWalk{ctx: ctx, tw: tar.NewWriter(w), links: map[[2]uint64]string{}, buf: make([]byte, 64<<10)}
	if err := d.dir(fd, "", 0); err != nil {
		return nil, err
	}
	return d.deleted, d.tw.Close()
}

// dir walks the directory open as fd, whose path in the tar is rel, and closes fd.
func (d *diffWalk) dir(fd int, rel string, depth int) error {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if depth > maxDepth {
		return fmt.Errorf("/%s: directories nested deeper than %d", rel, maxDepth)
	}
	for {
		// In batches: a directory of millions of entries is never all in memory.
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := d.entry(int(f.Fd()), name, path.Join(rel, name), depth); err != nil {
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

// entry records the entry name of the directory dirfd as rel.
func (d *diffWalk) entry(dirfd int, name, rel string, depth int) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed while we walk: the container is running
	}
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	afterStat(rel)
	h := &tar.Header{
		Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			d.deleted = append(d.deleted, "/"+rel)
		}
		return nil // a device node the container made is not its data
	case unix.S_IFLNK:
		n, err := unix.Readlinkat(fd, "", d.buf[:unix.PathMax])
		if err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(d.buf[:n])
		return d.tw.WriteHeader(h)
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		if err := d.tw.WriteHeader(h); err != nil {
			return err
		}
		sub, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
		return d.dir(sub, rel, depth+1)
	case unix.S_IFREG:
		return d.file(fd, &st, h)
	}
	return nil // FIFOs and sockets hold no data
}

// file records the regular file open (O_PATH) as fd.
func (d *diffWalk) file(fd int, st *unix.Stat_t, h *tar.Header) error {
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := d.links[key]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return d.tw.WriteHeader(h)
		}
		d.links[key] = h.Name
	}
	if holes := st.Size - st.Blocks*512; holes > 0 {
		if d.holes += holes; d.holes > maxHoles {
			return fmt.Errorf("/%s: %w: %d bytes of holes in the diff, more than %d (the archive cannot keep holes)", h.Name, ErrSparse, d.holes, maxHoles)
		}
	}
	// Reopening the descriptor's /proc link opens the inode we hold, whatever the name
	// points to now.
	r, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("/%s: %w", h.Name, err)
	}
	defer r.Close()
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := d.tw.WriteHeader(h); err != nil {
		return err
	}
	// Exactly the size we wrote in the header: a file that grows meanwhile is cut there, one
	// that shrinks is padded with zeros.
	n, err := io.CopyBuffer(d.tw, io.LimitReader(r, st.Size), d.buf)
	if err != nil {
		return fmt.Errorf("/%s: %w", h.Name, err)
	}
	for n < st.Size {
		zero := d.buf[:min(int64(len(d.buf)), st.Size-n)]
		clear(zero)
		m, err := d.tw.Write(zero)
		if err != nil {
			return err
		}
		n += int64(m)
	}
	return nil
}
