package containerlog

import (
	"os"
	"path/filepath"
	"testing"
)

// The watch tells Docker's rotation (rename, then a new file) from the same file growing,
// from a removed container, and from a file that was not there when the pass began.
func TestRotationWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "containers", "c")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c-json.log")
	write := func(s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}

	early := watchRotation(path, true) // before the container's first start
	write("a\n")
	if !early.rotated() {
		t.Error("a file that appeared after the pass began: want it taken for a rotation (what Docker did is not known)")
	}
	w := watchRotation(path, true)
	write("b\n")
	if w.rotated() {
		t.Error("the same file grown: not a rotation")
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if !w.rotated() {
		t.Error("renamed, the next not made yet: want a rotation")
	}
	write("c\n")
	if !w.rotated() {
		t.Error("another file at the path: want a rotation")
	}
	if watchRotation(path, false).rotated() || watchRotation("", true).rotated() {
		t.Error("a plain pass, or no path: nothing is watched")
	}
	gone := watchRotation(path, true)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if gone.rotated() {
		t.Error("the container's directory removed: not a rotation")
	}
}
