package containerlog

import (
	"os"
	"path/filepath"
	"testing"
)

// A symbolic link where a log file goes does not lead our writes to its target: creating and
// opening the file refuse it.
func TestLogFileIsNotOpenedThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "c.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := createFile(link); err == nil {
		t.Error("createFile followed the symbolic link")
	}
	if f, _, err := openLogFile(link); err == nil {
		f.Close()
		t.Error("openLogFile followed the symbolic link")
	}
	if data, _ := os.ReadFile(target); string(data) != "kept\n" {
		t.Errorf("the link's target holds %q", data)
	}
}
