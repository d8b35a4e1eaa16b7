// Package checkpointarchive writes a container checkpoint (the kubelet's CheckpointContainer)
// as one tar in the layout containerd and CRI-O write, which checkpointctl reads: CRIU's
// images under checkpoint/, the container's metadata in config.dump, its OCI spec in
// spec.dump, the files its processes changed in rootfs-diff.tar and those they deleted in
// deleted.files.
package checkpointarchive

import (
	"archive/tar"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config is config.dump, with checkpointctl's field names.
type Config struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	RootfsImage     string    `json:"rootfsImage,omitempty"`
	RootfsImageRef  string    `json:"rootfsImageRef,omitempty"`
	RootfsImageName string    `json:"rootfsImageName,omitempty"`
	OCIRuntime      string    `json:"runtime,omitempty"`
	CreatedTime     time.Time `json:"createdTime"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`
}

// Contents is what goes into the archive.
type Contents struct {
	// CriuDir holds CRIU's images of the dump.
	CriuDir string
	Config  Config
	// Spec is the container's OCI runtime spec (config.json of its bundle).
	Spec []byte
	// UpperDir is the container's overlay upper directory: its writes to the image's files; ""
	// for none known.
	UpperDir string
	// StageDir holds the rootfs diff while it is written (the archive's directory if ""): the
	// archive's tar needs its size before its bytes, and it is never all in memory.
	StageDir string
}

// Write writes the archive to path, which must not exist: into a temporary file beside it,
// renamed into place once complete, so the kubelet never sees half an archive. ctx ends the
// rootfs diff's walk.
func Write(ctx context.Context, path string, c Contents) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := tar.NewWriter(tmp)
	config, err := json.MarshalIndent(c.Config, "", "  ")
	if err != nil {
		return err
	}
	if err := addBytes(tw, "config.dump", config); err != nil {
		return err
	}
	if err := addBytes(tw, "spec.dump", c.Spec); err != nil {
		return err
	}
	if err := addTree(tw, c.CriuDir, "checkpoint"); err != nil {
		return fmt.Errorf("CRIU images: %w", err)
	}
	if c.UpperDir != "" {
		if err := addRootfsDiff(ctx, tw, c.UpperDir, cmp.Or(c.StageDir, filepath.Dir(path))); err != nil {
			return fmt.Errorf("rootfs diff of %s: %w", c.UpperDir, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	return os.Rename(tmp.Name(), path)
}

func addBytes(tw *tar.Writer, name string, body []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}

// addRootfsDiff adds rootfs-diff.tar, staged in a temporary file in stage, and deleted.files.
func addRootfsDiff(ctx context.Context, tw *tar.Writer, upper, stage string) error {
	diff, err := os.CreateTemp(stage, ".rootfs-diff-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(diff.Name())
	defer diff.Close()
	deleted, err := writeRootfsDiff(ctx, upper, diff)
	if err != nil {
		return err
	}
	size, err := diff.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := diff.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "rootfs-diff.tar", Mode: 0o600, Size: size, ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, diff, size); err != nil {
		return err
	}
	if len(deleted) == 0 {
		return nil
	}
	list, err := json.Marshal(deleted)
	if err != nil {
		return err
	}
	return addBytes(tw, "deleted.files", list)
}

// addTree adds the regular files and directories under dir as prefix/... .
func addTree(tw *tar.Writer, dir, prefix string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		return addEntry(tw, p, filepath.ToSlash(filepath.Join(prefix, rel)), d)
	})
}

// addEntry adds file p as name: a directory, a regular file or a symlink; anything else is
// skipped.
func addEntry(tw *tar.Writer, p, name string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	link := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	} else if !info.Mode().IsRegular() && !info.IsDir() {
		return nil
	}
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	h.Name = name
	if info.IsDir() {
		h.Name += "/"
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// BundleSpec reads the OCI spec of the container whose first process is pid: config.json of
// its bundle, the working directory of the process's parent (the containerd shim runs in the
// bundle). proc is the host's procfs.
func BundleSpec(proc string, pid int) ([]byte, error) {
	if pid <= 0 {
		return nil, errors.New("the container has no process")
	}
	stat, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; it ends at the last ')'.
	end := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat)[end+1:])
	if end < 0 || len(fields) < 2 {
		return nil, fmt.Errorf("unreadable %s/%d/stat", proc, pid)
	}
	bundle, err := os.Readlink(filepath.Join(proc, fields[1], "cwd"))
	if err != nil {
		return nil, fmt.Errorf("the bundle of process %d (its parent %s's working directory): %w", pid, fields[1], err)
	}
	spec, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("the OCI spec of process %d: %w", pid, err)
	}
	if !json.Valid(spec) {
		return nil, fmt.Errorf("%s/config.json is not JSON", bundle)
	}
	return spec, nil
}
