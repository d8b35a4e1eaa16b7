package fswalk

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// What the tree's owner swaps while we walk it sends the walk nowhere else: a directory
// swapped for a symlink to the host's is walked as the directory we looked at, a file swapped
// for a symlink is not opened, and a file replaced by a rename is read as the new file.
func TestWalkStaysWithTheInodesItOpened(t *testing.T) {
	dir := t.TempDir()
	root, host := filepath.Join(dir, "root"), filepath.Join(dir, "host")
	write(t, filepath.Join(host, "secret", "shadow"), "host")
	write(t, filepath.Join(root, "d", "x"), "x")
	write(t, filepath.Join(root, "f"), "mine")
	write(t, filepath.Join(root, "r"), "old")
	write(t, filepath.Join(root, "gone"), "")
	if err := os.Symlink(host, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	swapForSymlink := func(name, moveTo string) {
		p := filepath.Join(root, name)
		if err := os.Rename(p, moveTo); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(host, p); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	read := map[string]string{}
	err := Walk(context.Background(), root, func(e *Entry) error {
		seen = append(seen, e.Rel)
		switch e.Rel {
		case "d":
			swapForSymlink("d", filepath.Join(dir, "moved-d"))
		case "f": // a file swapped for a symlink to the host's is not opened
			swapForSymlink("f", filepath.Join(dir, "moved-f"))
			if f, err := e.Open(); !errors.Is(err, ErrChanged) {
				t.Errorf("f, swapped for a symlink, opened: %v", err)
				f.Close()
			}
		case "r": // a file replaced by a rename is read as the new one
			write(t, filepath.Join(dir, "new-r"), "newer")
			if err := os.Rename(filepath.Join(dir, "new-r"), filepath.Join(root, "r")); err != nil {
				t.Fatal(err)
			}
			f, err := e.Open()
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(f)
			f.Close()
			read["r"] = string(b)
			if e.Stat.Size != int64(len("newer")) {
				t.Errorf("r's stat after Open: size %d", e.Stat.Size)
			}
		case "link":
			if e.Stat.Mode&unix.S_IFMT != unix.S_IFLNK {
				t.Errorf("link: mode %o", e.Stat.Mode)
			}
			if target, err := e.Readlink(); err != nil || target != host {
				t.Errorf("link's target %q, %v", target, err)
			}
			if _, err := e.Open(); err == nil {
				t.Error("a symlink opened as a file")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"d", "d/x", "f", "gone", "link", "r"}) {
		t.Errorf("walked %v", seen)
	}
	for _, rel := range seen {
		if strings.Contains(rel, "secret") {
			t.Errorf("walked into the host: %v", seen)
		}
	}
	if read["r"] != "newer" {
		t.Errorf("r read %q", read["r"])
	}
}

func TestWalkBounds(t *testing.T) {
	t.Run("a removed entry is skipped", func(t *testing.T) {
		root := t.TempDir()
		for _, n := range []string{"a", "b", "c"} {
			write(t, filepath.Join(root, n), n)
		}
		var seen []string
		err := Walk(context.Background(), root, func(e *Entry) error {
			if len(seen) == 0 { // the first one removes the others
				for _, n := range []string{"a", "b", "c"} {
					if n != e.Rel {
						os.Remove(filepath.Join(root, n))
					}
				}
			}
			seen = append(seen, e.Rel)
			return nil
		})
		if err != nil || len(seen) != 1 {
			t.Errorf("walked %v: %v", seen, err)
		}
	})
	t.Run("depth", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, strings.Repeat("d/", MaxDepth+2)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Walk(context.Background(), root, func(*Entry) error { return nil }); !errors.Is(err, ErrTooDeep) {
			t.Errorf("%d directories deep: %v", MaxDepth+2, err)
		}
		// MaxDepth is walked.
		root = t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, strings.Repeat("d/", MaxDepth)), 0o755); err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := Walk(context.Background(), root, func(*Entry) error { n++; return nil }); err != nil || n != MaxDepth {
			t.Errorf("%d directories deep: %d walked, %v", MaxDepth, n, err)
		}
	})
	t.Run("its context ends it", func(t *testing.T) {
		root := t.TempDir()
		write(t, filepath.Join(root, "a"), "")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := Walk(ctx, root, func(*Entry) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("walk with its context ended: %v", err)
		}
	})
	t.Run("the root is not followed", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(t.TempDir(), filepath.Join(dir, "root")); err != nil {
			t.Fatal(err)
		}
		if err := Walk(context.Background(), filepath.Join(dir, "root"), func(*Entry) error { return nil }); err == nil {
			t.Error("a symlink as the root was walked")
		}
	})
}
