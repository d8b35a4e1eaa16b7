package core

import (
	"os"
	"path/filepath"
	"testing"
)

// writeFileAtomic replaces a file's content, and fails, leaving no temporary file, when the
// file cannot be replaced (here a directory is in its place).
func TestWriteFileAtomicReplacesOrFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandbox.json")
	for _, content := range []string{"old", "new"} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "new" {
		t.Errorf("content %q, %v; want new", got, err)
	}
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(blocked, []byte("x")); err == nil {
		t.Error("writeFileAtomic over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want sandbox.json and blocked, no temporary", len(entries))
	}
}
