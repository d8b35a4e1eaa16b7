package checkpointarchive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/cri-dockerd/cri-dockerd/internal/fswalk"
)

// mkfiles writes files (path: body) under dir.
func mkfiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// diffOf is the rootfs diff of upper: its tar's bytes, its names and its headers by name.
func diffOf(t *testing.T, upper string) ([]byte, []string, map[string]*tar.Header, map[string][]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	_, err := writeRootfsDiff(context.Background(), upper, &buf)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	files, names := readTar(t, bytes.NewReader(buf.Bytes()))
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		headers[h.Name] = h
	}
	return buf.Bytes(), names, headers, files, nil
}

// The running container swaps what it owns between our stat and our read: a file for a symlink
// to the host's secret, a directory for a symlink to the host's directory, a file for a device
// node. The host's files never land in the diff.
func TestRootfsDiffReadsOnlyTheInodesItLookedAt(t *testing.T) {
	dir := t.TempDir()
	upper, outside := filepath.Join(dir, "upper"), filepath.Join(dir, "host")
	const secret = "host-secret-never-in-a-diff"
	mkfiles(t, outside, map[string]string{"shadow": secret, "etc/shadow": secret})
	mkfiles(t, upper, map[string]string{"data": "mine", "dir/inner": "inner", "dev": "not a device", "conf": "old"})
	// Symlinks that stay symlinks: recorded as links, never followed.
	if err := os.Symlink(filepath.Join(outside, "shadow"), filepath.Join(upper, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../host/etc", filepath.Join(upper, "up")); err != nil {
		t.Fatal(err)
	}
	swap := func(name string, make func(string) error) {
		p := filepath.Join(upper, name)
		tmp := p + ".new"
		if err := make(tmp); err != nil {
			t.Error(err)
			return
		}
		if name == "dir" { // rename cannot put a symlink over a directory: move it away first
			if err := os.Rename(p, filepath.Join(dir, "moved")); err != nil {
				t.Error(err)
			}
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Error(err)
		}
	}
	swapped := map[string]bool{}
	old := afterStat
	t.Cleanup(func() { afterStat = old })
	afterStat = func(rel string) {
		if swapped[rel] {
			return
		}
		swapped[rel] = true
		switch rel {
		case "data":
			swap(rel, func(p string) error { return os.Symlink(filepath.Join(outside, "shadow"), p) })
		case "dir":
			swap(rel, func(p string) error { return os.Symlink(outside, p) })
		case "conf": // replaced atomically, as a program rewrites its configuration
			swap(rel, func(p string) error { return os.WriteFile(p, []byte("new conf"), 0o644) })
		case "dev":
			if os.Geteuid() == 0 { // /dev/zero's numbers: reading it never ends
				swap(rel, func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|5) })
			}
		}
	}
	raw, names, headers, files, err := diffOf(t, upper)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data", "dir", "dev", "conf"} {
		if !swapped[name] {
			t.Fatalf("the walk never looked at %s: %v", name, names)
		}
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatalf("the host's file is in the diff: %v", names)
	}
	// A file swapped for a symlink or a device while we look is left out; the directory is
	// walked as it was; a file replaced by a rename is the new one.
	_, hasData := headers["data"]
	dev, hasDev := files["dev"]
	if hasData || string(files["dir/inner"]) != "inner" || string(files["conf"]) != "new conf" || (hasDev && string(dev) != "not a device") {
		t.Errorf("diff %v: data %q, dir/inner %q, conf %q, dev %q", names, files["data"], files["dir/inner"], files["conf"], files["dev"])
	}
	if h := headers["abs"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != filepath.Join(outside, "shadow") {
		t.Errorf("abs: %+v", h)
	}
	if h := headers["up"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../host/etc" {
		t.Errorf("up: %+v", h)
	}
}

func TestRootfsDiffIsBoundedByWhatTheLayerHolds(t *testing.T) {
	t.Run("hard links are links", func(t *testing.T) {
		upper := t.TempDir()
		mkfiles(t, upper, map[string]string{"big": strings.Repeat("x", 1<<20)})
		for _, n := range []string{"a", "b", "c", "d"} {
			if err := os.Link(filepath.Join(upper, "big"), filepath.Join(upper, n)); err != nil {
				t.Fatal(err)
			}
		}
		raw, names, headers, _, err := diffOf(t, upper)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 1<<20+16<<10 {
			t.Errorf("five names of one 1 MiB file make a %d-byte diff", len(raw))
		}
		links := 0
		for _, name := range names {
			if h := headers[name]; h.Typeflag == tar.TypeLink {
				links++
			}
		}
		if len(names) != 5 || links != 4 {
			t.Errorf("names %v, %d hard links", names, links)
		}
	})
	t.Run("holes", func(t *testing.T) {
		upper := t.TempDir()
		mkfiles(t, upper, map[string]string{"small": "s"})
		f, err := os.Create(filepath.Join(upper, "sparse"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 40); err != nil { // 1 TiB, a few bytes on disk
			t.Fatal(err)
		}
		f.Close()
		if _, _, _, _, err := diffOf(t, upper); !errors.Is(err, ErrSparse) || !strings.Contains(err.Error(), "/sparse") {
			t.Fatalf("a 1 TiB sparse file: %v", err)
		}
		// The checkpoint fails whole, staging nothing.
		dir := t.TempDir()
		out := filepath.Join(dir, "checkpoint.tar")
		if err := Write(context.Background(), out, Contents{CriuDir: t.TempDir(), Spec: []byte("{}"), UpperDir: upper, StageDir: dir}); !errors.Is(err, ErrSparse) {
			t.Fatalf("Write: %v", err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("left: %v", left)
		}
	})
	t.Run("depth", func(t *testing.T) {
		upper := t.TempDir()
		deep := filepath.Join(upper, strings.Repeat("d/", fswalk.MaxDepth+2))
		if err := os.MkdirAll(deep, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := diffOf(t, upper); !errors.Is(err, fswalk.ErrTooDeep) {
			t.Fatalf("directories %d deep: %v", fswalk.MaxDepth+2, err)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		dir := t.TempDir()
		upper := filepath.Join(dir, "upper")
		mkfiles(t, upper, map[string]string{"small": "s"})
		f, err := os.Create(filepath.Join(upper, "big"))
		if err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte{'y'}, 1<<20)
		for range 32 {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out := filepath.Join(dir, "checkpoint.tar")
		if err := Write(context.Background(), out, Contents{CriuDir: t.TempDir(), Spec: []byte("{}"), UpperDir: upper}); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		// Allocations, not the heap's size: they count every byte the write ever held.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
			t.Errorf("archiving a 32 MiB file allocated %d bytes", alloc)
		}
		if st, err := os.Stat(out); err != nil || st.Size() < 32<<20 {
			t.Errorf("archive %v, %v", st, err)
		}
	})
	t.Run("ended by its context", func(t *testing.T) {
		dir := t.TempDir()
		upper := filepath.Join(dir, "upper")
		mkfiles(t, upper, map[string]string{"a": "a"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out := filepath.Join(dir, "checkpoint.tar")
		if err := Write(ctx, out, Contents{CriuDir: t.TempDir(), Spec: []byte("{}"), UpperDir: upper}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with its context ended: %v", err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
			t.Errorf("left: %v", left)
		}
	})
}
