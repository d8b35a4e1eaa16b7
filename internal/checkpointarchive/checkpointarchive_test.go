package checkpointarchive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// readTar returns a tar's regular files by name, and every name in order.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
		}
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	criu := filepath.Join(dir, "criu")
	upper := filepath.Join(dir, "upper")
	for path, body := range map[string]string{
		filepath.Join(criu, "inventory.img"): "inv", filepath.Join(criu, "pages-1.img"): "pages",
		filepath.Join(upper, "etc", "app.conf"): "changed", filepath.Join(upper, "tmp", "new"): "new",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	whiteout := os.Geteuid() == 0 // a whiteout is a 0:0 character device: mknod needs root
	if whiteout {
		if err := syscall.Mknod(filepath.Join(upper, "etc", "gone"), syscall.S_IFCHR|0o600, 0); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "checkpoint.tar")
	at := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	err := Write(context.Background(), out, Contents{CriuDir: criu, Spec: []byte(`{"ociVersion":"1.0.2"}`), UpperDir: upper,
		Config: Config{ID: "abc", Name: "app", RootfsImageName: "busybox:latest", CheckpointedAt: at}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, names := readTar(t, f)
	for _, want := range []string{"config.dump", "spec.dump", "checkpoint/", "checkpoint/inventory.img", "checkpoint/pages-1.img", "rootfs-diff.tar"} {
		if !slices.Contains(names, want) {
			t.Errorf("archive lacks %s: %v", want, names)
		}
	}
	var cfg map[string]any
	if err := json.Unmarshal(files["config.dump"], &cfg); err != nil || cfg["id"] != "abc" || cfg["rootfsImageName"] != "busybox:latest" || cfg["checkpointedTime"] != "2026-12-03T17:00:00Z" {
		t.Errorf("config.dump %s (%v)", files["config.dump"], err)
	}
	if string(files["spec.dump"]) != `{"ociVersion":"1.0.2"}` || string(files["checkpoint/pages-1.img"]) != "pages" {
		t.Errorf("spec.dump %q, pages %q", files["spec.dump"], files["checkpoint/pages-1.img"])
	}
	diff, diffNames := readTar(t, bytes.NewReader(files["rootfs-diff.tar"]))
	if string(diff["etc/app.conf"]) != "changed" || string(diff["tmp/new"]) != "new" || slices.Contains(diffNames, "etc/gone") {
		t.Errorf("rootfs-diff.tar %v", diffNames)
	}
	if whiteout {
		var deleted []string
		if err := json.Unmarshal(files["deleted.files"], &deleted); err != nil || !slices.Equal(deleted, []string{"/etc/gone"}) {
			t.Errorf("deleted.files %s (%v), want [/etc/gone]", files["deleted.files"], err)
		}
	}
	// Never over an existing file, and nothing left beside it.
	if err := Write(context.Background(), out, Contents{CriuDir: criu, Spec: []byte("{}")}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Write over an existing archive: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".checkpoint.tar.*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestBundleSpec(t *testing.T) {
	proc, bundle := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.2.0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	mk := func(pid, stat string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("100", "100 (containerd-shim) S 1 100 1 0 -1")
	mk("200", "200 (sh (odd) name) S 100 200 200 0 -1")
	if err := os.Symlink(bundle, filepath.Join(proc, "100", "cwd")); err != nil {
		t.Fatal(err)
	}
	spec, err := BundleSpec(proc, 200)
	if err != nil || string(spec) != `{"ociVersion":"1.2.0"}` {
		t.Fatalf("BundleSpec = %s, %v", spec, err)
	}
	for _, pid := range []int{0, 100, 300} {
		if _, err := BundleSpec(proc, pid); err == nil {
			t.Errorf("BundleSpec(%s): no error", strconv.Itoa(pid))
		}
	}
}
