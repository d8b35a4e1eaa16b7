//go:build linux

package network

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNetNSPinKeepsANamespaceUntilUnpinned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	pins := NewNetNSPins(dir)
	if p := pins.Path("sb1"); p != "" {
		t.Fatalf("Path before a pin = %q", p)
	}
	path, err := pins.Pin("sb1", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pins.Unpin("sb1") })
	if got := pins.Path("sb1"); got != path || got != filepath.Join(dir, "sb1") {
		t.Fatalf("Path = %q, want the pin %q", got, path)
	}
	var own, pinned os.FileInfo
	if own, err = os.Stat("/proc/self/ns/net"); err == nil {
		pinned, err = os.Stat(path)
	}
	if err != nil || !os.SameFile(own, pinned) {
		t.Fatalf("the pin is not this process's network namespace (%v)", err)
	}
	for i := 0; i < 2; i++ {
		if err := pins.Unpin("sb1"); err != nil {
			t.Fatalf("unpin %d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pin file still there: %v", err)
	}
	// A file that is not a mount (what a reboot leaves) is no pin.
	if err := os.WriteFile(path, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	if p := pins.Path("sb1"); p != "" {
		t.Errorf("Path of a plain file = %q, want none", p)
	}
	if _, err := pins.Pin("../x", os.Getpid()); err == nil {
		t.Error("a pin outside the directory was made")
	}
}
