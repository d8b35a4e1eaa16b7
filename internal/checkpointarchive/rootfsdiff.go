package checkpointarchive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cri-dockerd/cri-dockerd/internal/fswalk"
)

// maxHoles bounds the bytes of holes the diff may write: tar has no holes, so a sparse file of
// 1 TiB that occupies 4 KiB on the node's disk would become 1 TiB in the archive. Beyond it the
// checkpoint fails naming the file: the archive never grows much past what the container's
// writable layer occupies.
const maxHoles = 64 << 20

// ErrSparse is the error of a diff whose sparse files exceed maxHoles.
var ErrSparse = errors.New("sparse files")

// afterStat runs between an entry's stat and its read: tests swap the entry there.
var afterStat = func(rel string) {}

// diffWalk writes one upper directory's tar. The container runs on while we read what it owns,
// so the walk is fswalk's: beneath descriptors, never by path. An entry the container changes
// while we look (a file swapped for a symlink) is left out; a file it replaces by a rename is
// recorded as the new one.
type diffWalk struct {
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
	d := &diffWalk{tw: tar.NewWriter(w), links: map[[2]uint64]string{}, buf: make([]byte, 64<<10)}
	if err := fswalk.Walk(ctx, upper, d.entry); err != nil {
		return nil, err
	}
	return d.deleted, d.tw.Close()
}

func (d *diffWalk) entry(e *fswalk.Entry) error {
	afterStat(e.Rel)
	switch e.Stat.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if e.Stat.Rdev == 0 {
			d.deleted = append(d.deleted, "/"+e.Rel)
		}
		return nil // a device node the container made is not its data
	case unix.S_IFLNK:
		target, err := e.Readlink()
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // no longer a symlink: the container is changing it
		}
		if err != nil {
			return err
		}
		h := header(e)
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return d.tw.WriteHeader(h)
	case unix.S_IFDIR:
		h := header(e)
		h.Typeflag, h.Name = tar.TypeDir, e.Rel+"/"
		return d.tw.WriteHeader(h)
	case unix.S_IFREG:
		return d.file(e)
	}
	return nil // FIFOs and sockets hold no data
}

// header is e's tar header, but for its type.
func header(e *fswalk.Entry) *tar.Header {
	st := &e.Stat
	return &tar.Header{
		Name: e.Rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
	}
}

// file records the regular file of e.
func (d *diffWalk) file(e *fswalk.Entry) error {
	r, err := e.Open()
	if errors.Is(err, fswalk.ErrChanged) {
		return nil // no longer a file: the container is changing it
	}
	if err != nil {
		return err
	}
	defer r.Close()
	st, h := &e.Stat, header(e)
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
