package stats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/stats/statstest"
)

var fixedTime = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// fixtureHost is the fixture NAME (statstest) as a Host.
func fixtureHost(t *testing.T, name string) Host {
	sys, proc := statstest.Fixture(t, name)
	return Host{sys: sys, proc: proc}
}

func TestDetectCgroupHierarchy(t *testing.T) {
	v2, v1 := fixtureHost(t, "cgroupv2"), fixtureHost(t, "cgroupv1")
	legacy := t.TempDir() // v1 without systemd's unified mount: a tmpfs of hierarchies
	if err := os.Mkdir(filepath.Join(legacy, "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root string
		want       cgroupHierarchy
	}{
		{"v2", v2.CgroupRoot(), cgroupHierarchy{version: 2, unified: v2.CgroupRoot()}},
		{"v1 hybrid", v1.CgroupRoot(), cgroupHierarchy{version: 1, unified: filepath.Join(v1.CgroupRoot(), "unified")}},
		{"v1 legacy", legacy, cgroupHierarchy{version: 1}},
		{"nothing mounted", filepath.Join(legacy, "missing"), cgroupHierarchy{version: 1}},
	} {
		if got := detectCgroupHierarchy(tc.root); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCgroupDirsOfAProcess(t *testing.T) {
	v2 := fixtureHost(t, "cgroupv2")
	dirs, hier, ok := v2.cgroupDirs(4242)
	if want := filepath.Join(v2.sys, statstest.FixtureV2Dir); !ok || hier.version != 2 || len(dirs) != 1 || dirs[""] != want {
		t.Errorf("v2: %v %+v %v, want only %s", dirs, hier, ok, want)
	}
	if got := v2.unifiedDir(4242); got != filepath.Join(v2.sys, statstest.FixtureV2Dir) {
		t.Errorf("v2 unified dir %q", got)
	}

	v1 := fixtureHost(t, "cgroupv1")
	dirs, hier, ok = v1.cgroupDirs(4242)
	root := v1.CgroupRoot()
	for ctrl, want := range map[string]string{
		"memory":       "memory",
		"pids":         "pids",
		"blkio":        "blkio",
		"cpu":          "cpu,cpuacct", // co-mounted: one directory named after both
		"cpuacct":      "cpu,cpuacct",
		"name=systemd": "systemd",
		"":             "unified",
	} {
		if got := dirs[ctrl]; got != filepath.Join(root, want, "docker", statstest.FixtureContainer) {
			t.Errorf("v1 %q: %q, want under %s", ctrl, got, want)
		}
	}
	if !ok || hier.version != 1 {
		t.Errorf("v1: %+v %v", hier, ok)
	}
	if got := v1.unifiedDir(4242); got != "" {
		t.Errorf("v1 unified dir %q: a hybrid node's unified hierarchy has no controllers", got)
	}
	if _, _, ok := v1.cgroupDirs(99999); ok {
		t.Error("cgroup dirs of a process that does not exist")
	}
	// Controllers mounted one by one (no "cpu,cpuacct" directory): the first one's directory.
	if err := os.Rename(filepath.Join(root, "cpu,cpuacct"), filepath.Join(root, "cpu")); err != nil {
		t.Fatal(err)
	}
	if dirs, _, _ := v1.cgroupDirs(4242); dirs["cpuacct"] != filepath.Join(root, "cpu", "docker", statstest.FixtureContainer) {
		t.Errorf("cpuacct mounted with cpu under cpu/: %q", dirs["cpuacct"])
	}
	// A cgroup file with no line of ours says nothing.
	if err := os.WriteFile(filepath.Join(v1.proc, "4242", "cgroup"), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dirs, _, ok := v1.cgroupDirs(4242); ok {
		t.Errorf("cgroup dirs from a file without a cgroup line: %v", dirs)
	}

	// A path that climbs out stays under the mount.
	if err := os.WriteFile(filepath.Join(v2.proc, "4242", "cgroup"), []byte("0::/../../etc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dirs, _, _ := v2.cgroupDirs(4242); dirs[""] != filepath.Join(v2.CgroupRoot(), "etc") {
		t.Errorf("climbing path gave %q", dirs[""])
	}
}

func TestReadCgroupV2Files(t *testing.T) {
	h := fixtureHost(t, "cgroupv2")
	dir := filepath.Join(h.sys, statstest.FixtureV2Dir)

	mem, ok := h.CgroupMemory(4242)
	// memory.events: oom_kill, not oom (the times the limit was hit); memory.stat: kernel.
	if !ok || mem.OOMKills != 2 || mem.Kernel != 2211840 {
		t.Errorf("memory %+v %v, want 2 OOM kills and 2211840 bytes of kernel memory", mem, ok)
	}
	// Before Linux 5.18 memory.stat has no "kernel": the parts it sums.
	stat := filepath.Join(dir, "memory.stat")
	raw, _ := os.ReadFile(stat)
	var older []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "kernel ") {
			older = append(older, line)
		}
	}
	if err := os.WriteFile(stat, []byte(strings.Join(older, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if mem, _ := h.CgroupMemory(4242); mem.Kernel != 163840+1820320+4096+480 {
		t.Errorf("kernel memory without a kernel key: %d", mem.Kernel)
	}

	if swap, ok := readCgroupV2Swap(dir); !ok || swap != 1048576 {
		t.Errorf("swap %d %v", swap, ok)
	}
	if _, ok := readCgroupV2Swap(t.TempDir()); ok {
		t.Error("swap without memory.swap.current (no swap accounting)")
	}

	io, ok := readCgroupV2IO(dir)
	want := []IOStat{{8, 0, 1048576, 4194304, 64, 128}, {253, 0, 2048, 0, 2, 0}}
	if !ok || len(io) != len(want) || io[0] != want[0] || io[1] != want[1] {
		t.Errorf("io.stat %+v, want %+v", io, want)
	}

	p, ok := h.Processes(4242)
	if !ok || p != (ProcessCounts{Processes: 2, FDs: 6, Sockets: 2}) {
		t.Errorf("processes %+v %v", p, ok)
	}
	nets, err := h.NetDev(4242)
	if err != nil || len(nets) != 1 || nets["eth0"] != (container.NetworkStats{RxBytes: 12345, RxPackets: 67, RxErrors: 1, RxDropped: 2, TxBytes: 6789, TxPackets: 45, TxErrors: 3, TxDropped: 4}) {
		t.Errorf("net/dev %+v %v", nets, err)
	}
	if got := h.BlockDevice(8, 0); got != "/dev/sda" {
		t.Errorf("device 8:0 is %q", got)
	}
	if got := h.BlockDevice(253, 0); got != "253:0" {
		t.Errorf("device 253:0 unknown to sysfs is %q", got)
	}
}

func TestReadCgroupV1Files(t *testing.T) {
	h := fixtureHost(t, "cgroupv1")
	mem, ok := h.CgroupMemory(4242)
	if !ok || mem.OOMKills != 1 || mem.Kernel != 3<<20 {
		t.Errorf("memory %+v %v, want memory.oom_control's oom_kill and memory.kmem.usage_in_bytes", mem, ok)
	}
	if p, ok := h.Processes(4242); !ok || p.Processes != 1 || p.FDs != 4 || p.Sockets != 1 {
		t.Errorf("processes %+v %v, from the pids hierarchy", p, ok)
	}
}

// Docker's memory.stat keys differ by hierarchy: v1 reports the hierarchy's totals as total_*
// next to the cgroup's own values; v2 has only the kernel's names, which count descendants.
func TestSampleFromDockerByHierarchy(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		stats                      map[string]uint64
		workingSet, rss, pf, swaps uint64
		hasSwap                    bool
	}{
		{"v1", map[string]uint64{"total_inactive_file": 3 << 20, "inactive_file": 1 << 20, "total_rss": 4 << 20, "rss": 1, "total_pgfault": 9, "pgfault": 1, "total_swap": 5, "swap": 1}, 7 << 20, 4 << 20, 9, 5, true},
		{"v1 without swap accounting", map[string]uint64{"total_inactive_file": 3 << 20, "total_rss": 4 << 20}, 7 << 20, 4 << 20, 0, 0, false},
		{"v2", map[string]uint64{"inactive_file": 2 << 20, "anon": 6 << 20, "pgfault": 8}, 8 << 20, 6 << 20, 8, 0, false},
		{"v2, cache above usage", map[string]uint64{"inactive_file": 20 << 20}, 0, 0, 0, 0, false},
	} {
		s := sampleFromDocker(container.StatsResponse{Read: fixedTime, MemoryStats: container.MemoryStats{Usage: 10 << 20, Stats: tc.stats}})
		if s.WorkingSet != tc.workingSet || s.RSS != tc.rss || s.PageFaults != tc.pf || s.Swap != tc.swaps || s.HasSwap != tc.hasSwap {
			t.Errorf("%s: working set %d rss %d faults %d swap %d (%v), want %d %d %d %d (%v)", tc.name, s.WorkingSet, s.RSS, s.PageFaults, s.Swap, s.HasSwap, tc.workingSet, tc.rss, tc.pf, tc.swaps, tc.hasSwap)
		}
	}
}
