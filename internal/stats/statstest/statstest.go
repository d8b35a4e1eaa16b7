// Package statstest holds the fixtures of a node's sysfs and procfs, for the tests of the stats
// collector and of the CRI RPCs that report what it collects.
package statstest

import (
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// The fixtures under ../testdata are a node's /sys and /proc in the kernel's formats
// (Documentation/admin-guide/cgroup-v2.rst, cgroup-v1/): cgroupv2 is a cgroup v2 node with one
// container (processes 4242 and 4243) in systemd's scope, cgroupv1 a v1 node in systemd's hybrid
// layout (cpu and cpuacct co-mounted, an empty unified hierarchy) with Docker's cgroupfs paths.
const (
	// FixtureContainer is the ID of the fixtures' container.
	FixtureContainer = "8d0c3f1e5b2a4c6d9e7f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
	// FixtureV2Dir is its cgroup on the cgroup v2 node, under the fixture's sysfs.
	FixtureV2Dir = "fs/cgroup/system.slice/docker-" + FixtureContainer + ".scope"
)

// Fixture copies the fixture NAME into a temporary directory, adds what git cannot hold (file
// descriptor symlinks, sysfs names with a colon) and returns where its sysfs and procfs are.
func Fixture(t testing.TB, name string) (sys, proc string) {
	t.Helper()
	root := t.TempDir()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "testdata", name)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, raw, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"proc/4242/fd/0": "/dev/null", "proc/4242/fd/1": "pipe:[111]", "proc/4242/fd/2": "pipe:[111]", "proc/4242/fd/3": "socket:[222]",
		"proc/4243/fd/0": "/dev/null", "proc/4243/fd/1": "socket:[333]",
	}
	for link, target := range links {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	dev := filepath.Join(root, "sys/dev/block/8:0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "uevent"), []byte("MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\nDISKSEQ=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "sys"), filepath.Join(root, "proc")
}

// AsProcess makes pid (a fake container's) the process 4242 of the fixture whose procfs is proc.
func AsProcess(t testing.TB, proc string, pid int) {
	t.Helper()
	if err := os.Symlink("4242", filepath.Join(proc, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
}

// DockerStatsV2 is what Docker reports for the cgroup v2 directory dir: containerd's cgroups
// library reads the files (cgroup2/manager.go Stat; utils.go readIoStats, and
// getStatFileContentUint64, for which "max" is the largest uint64) and moby converts them
// (daemon/stats_unix.go statsV2, as in Docker 28.5 and 29.8): cpu.stat from µs to ns, memory.stat under
// the kernel's key names, memory.max capped at the machine's memory, memory.events "oom" as
// Failcnt, io.stat bytes as "read"/"write" entries; no I/O operations, no swap, no "kernel".
func DockerStatsV2(t testing.TB, dir string, machineMemory uint64) container.StatsResponse {
	t.Helper()
	read := func(name string) string {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(raw))
	}
	single := func(name string) uint64 {
		v := read(name)
		if v == "max" {
			return math.MaxUint64
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	flat := func(name string) map[string]uint64 {
		out := map[string]uint64{}
		for _, line := range strings.Split(read(name), "\n") {
			f := strings.Fields(line)
			n, err := strconv.ParseUint(f[1], 10, 64)
			if len(f) != 2 || err != nil {
				t.Fatalf("%s: line %q", name, line)
			}
			out[f[0]] = n
		}
		return out
	}
	cpu, mem, events := flat("cpu.stat"), flat("memory.stat"), flat("memory.events")
	st := container.StatsResponse{
		CPUStats: container.CPUStats{
			CPUUsage:       container.CPUUsage{TotalUsage: cpu["usage_usec"] * 1000, UsageInKernelmode: cpu["system_usec"] * 1000, UsageInUsermode: cpu["user_usec"] * 1000},
			ThrottlingData: container.ThrottlingData{Periods: cpu["nr_periods"], ThrottledPeriods: cpu["nr_throttled"], ThrottledTime: cpu["throttled_usec"] * 1000},
		},
		MemoryStats: container.MemoryStats{Stats: map[string]uint64{}, Usage: single("memory.current"), Limit: min(single("memory.max"), machineMemory), Failcnt: events["oom"]},
		PidsStats:   container.PidsStats{Current: single("pids.current"), Limit: single("pids.max")},
	}
	for _, k := range []string{"anon", "file", "kernel_stack", "slab", "sock", "shmem", "file_mapped", "file_dirty", "file_writeback", "anon_thp",
		"inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable", "pgfault", "pgmajfault",
		"workingset_refault", "workingset_activate", "workingset_nodereclaim", "pgrefill", "pgscan", "pgsteal", "pgactivate", "pgdeactivate",
		"pglazyfree", "pglazyfreed", "thp_fault_alloc", "thp_collapse_alloc"} {
		st.MemoryStats.Stats[k] = mem[k]
	}
	for _, line := range strings.Split(read("io.stat"), "\n") {
		f := strings.Fields(line)
		maj, minor, _ := strings.Cut(f[0], ":")
		e := container.BlkioStatEntry{}
		e.Major, _ = strconv.ParseUint(maj, 10, 64)
		e.Minor, _ = strconv.ParseUint(minor, 10, 64)
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "rbytes":
				e.Op, e.Value = "read", n
				st.BlkioStats.IoServiceBytesRecursive = append(st.BlkioStats.IoServiceBytesRecursive, e)
			case "wbytes":
				e.Op, e.Value = "write", n
				st.BlkioStats.IoServiceBytesRecursive = append(st.BlkioStats.IoServiceBytesRecursive, e)
			}
		}
	}
	return st
}
