package unifiedcgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"memory.high", "memory.oom.group", "memory.swap.max", "hugetlb.2MB.max", "cpu.weight", "io.max"} {
		if err := Check(ok, "1"); err != nil {
			t.Errorf("Check(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "memory", ".high", "memory.", "memory..high", "../memory.high", "memory.high/x", "x/../../memory.high", "Memory.high", "cgroup.procs", "cgroup.subtree_control", "memory.high\n"} {
		if err := Check(bad, "1"); err == nil {
			t.Errorf("Check(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"1\nmax", "1\x00"} {
		if err := Check("memory.high", bad); err == nil {
			t.Errorf("value %q accepted", bad)
		}
	}
}

func TestDirAndWrite(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	h := Host{Cgroups: root, Proc: proc}
	if h.V2() {
		t.Fatal("an empty root is cgroup v2")
	}
	mustWrite(t, filepath.Join(root, "cgroup.controllers"), "memory pids")
	if !h.V2() {
		t.Fatal("a root with cgroup.controllers is not cgroup v2")
	}
	// A cgroup path that climbs is kept below the root.
	mustWrite(t, filepath.Join(proc, "7", "cgroup"), "0::/../../etc\n")
	if dir, err := h.Dir(7); err != nil || dir != filepath.Join(root, "etc") {
		t.Errorf("Dir of a climbing path: %q, %v", dir, err)
	}
	mustWrite(t, filepath.Join(proc, "8", "cgroup"), "12:memory:/docker/x\n")
	if _, err := h.Dir(8); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("Dir of a v1-only process: %v", err)
	}
	if _, err := h.Dir(9); !errors.Is(err, ErrGone) {
		t.Errorf("Dir of no process: %v, want ErrGone", err)
	}
	mustWrite(t, filepath.Join(proc, "10", "cgroup"), "0::/system.slice/docker-abc.scope\n")
	dir, err := h.Dir(10)
	if err != nil || dir != filepath.Join(root, "system.slice", "docker-abc.scope") {
		t.Fatalf("Dir: %q, %v", dir, err)
	}
	mustWrite(t, filepath.Join(dir, "cgroup.controllers"), "memory pids\n")
	mustWrite(t, filepath.Join(dir, "memory.high"), "max\n")
	if err := Write(dir, []Setting{{"memory.high", "1048576"}}); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, "memory.high")); string(raw) != "1048576" {
		t.Errorf("memory.high %q", raw)
	}
	// A file the cgroup does not have is never created.
	err = Write(dir, []Setting{{"hugetlb.2MB.max", "0"}})
	if err == nil || !strings.Contains(err.Error(), `"memory pids"`) {
		t.Errorf("Write of a missing file: %v; want the controllers named", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "hugetlb.2MB.max")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a missing file was created: %v", serr)
	}
	if err := Write(dir, []Setting{{"../memory.high", "1"}}); err == nil {
		t.Error("Write took a path")
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
