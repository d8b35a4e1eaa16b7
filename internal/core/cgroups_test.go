package core

import (
	"context"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// The fixtures under testdata/ are a node's /sys and /proc in the kernel's formats
// (Documentation/admin-guide/cgroup-v2.rst, cgroup-v1/): cgroupv2 is a cgroup v2 node with one
// container (processes 4242 and 4243) in systemd's scope, cgroupv1 a v1 node in systemd's hybrid
// layout (cpu and cpuacct co-mounted, an empty unified hierarchy) with Docker's cgroupfs paths.
const fixtureContainer = "8d0c3f1e5b2a4c6d9e7f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"

var (
	fixtureV2Dir = "fs/cgroup/system.slice/docker-" + fixtureContainer + ".scope"
	fixedTime    = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

// fixtureHost copies testdata/NAME into a temporary directory, adds what git cannot hold
// (file descriptor symlinks, sysfs names with a colon) and returns it as a hostFS.
func fixtureHost(t *testing.T, name string) hostFS {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("testdata", name)
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
	return hostFS{sys: filepath.Join(root, "sys"), proc: filepath.Join(root, "proc")}
}

// asProcess makes pid (a fake container's) the fixture's process 4242.
func asProcess(t *testing.T, h hostFS, pid int) {
	t.Helper()
	if err := os.Symlink("4242", filepath.Join(h.proc, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
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
		{"v2", v2.cgroupRoot(), cgroupHierarchy{version: 2, unified: v2.cgroupRoot()}},
		{"v1 hybrid", v1.cgroupRoot(), cgroupHierarchy{version: 1, unified: filepath.Join(v1.cgroupRoot(), "unified")}},
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
	if want := filepath.Join(v2.sys, fixtureV2Dir); !ok || hier.version != 2 || len(dirs) != 1 || dirs[""] != want {
		t.Errorf("v2: %v %+v %v, want only %s", dirs, hier, ok, want)
	}
	if got := v2.unifiedDir(4242); got != filepath.Join(v2.sys, fixtureV2Dir) {
		t.Errorf("v2 unified dir %q", got)
	}

	v1 := fixtureHost(t, "cgroupv1")
	dirs, hier, ok = v1.cgroupDirs(4242)
	root := v1.cgroupRoot()
	for ctrl, want := range map[string]string{
		"memory":       "memory",
		"pids":         "pids",
		"blkio":        "blkio",
		"cpu":          "cpu,cpuacct", // co-mounted: one directory named after both
		"cpuacct":      "cpu,cpuacct",
		"name=systemd": "systemd",
		"":             "unified",
	} {
		if got := dirs[ctrl]; got != filepath.Join(root, want, "docker", fixtureContainer) {
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
	if dirs, _, _ := v1.cgroupDirs(4242); dirs["cpuacct"] != filepath.Join(root, "cpu", "docker", fixtureContainer) {
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
	if dirs, _, _ := v2.cgroupDirs(4242); dirs[""] != filepath.Join(v2.cgroupRoot(), "etc") {
		t.Errorf("climbing path gave %q", dirs[""])
	}
}

func TestReadCgroupV2Files(t *testing.T) {
	h := fixtureHost(t, "cgroupv2")
	dir := filepath.Join(h.sys, fixtureV2Dir)

	mem, ok := h.readCgroupMemory(4242)
	// memory.events: oom_kill, not oom (the times the limit was hit); memory.stat: kernel.
	if !ok || mem.oomKills != 2 || mem.kernel != 2211840 {
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
	if mem, _ := h.readCgroupMemory(4242); mem.kernel != 163840+1820320+4096+480 {
		t.Errorf("kernel memory without a kernel key: %d", mem.kernel)
	}

	if swap, ok := readCgroupV2Swap(dir); !ok || swap != 1048576 {
		t.Errorf("swap %d %v", swap, ok)
	}
	if _, ok := readCgroupV2Swap(t.TempDir()); ok {
		t.Error("swap without memory.swap.current (no swap accounting)")
	}

	io, ok := readCgroupV2IO(dir)
	want := []ioStat{{8, 0, 1048576, 4194304, 64, 128}, {253, 0, 2048, 0, 2, 0}}
	if !ok || len(io) != len(want) || io[0] != want[0] || io[1] != want[1] {
		t.Errorf("io.stat %+v, want %+v", io, want)
	}

	p, ok := h.readProcesses(4242)
	if !ok || p != (processCounts{processes: 2, fds: 6, sockets: 2}) {
		t.Errorf("processes %+v %v", p, ok)
	}
	nets, err := h.readNetDev(4242)
	if err != nil || len(nets) != 1 || nets["eth0"] != (container.NetworkStats{RxBytes: 12345, RxPackets: 67, RxErrors: 1, RxDropped: 2, TxBytes: 6789, TxPackets: 45, TxErrors: 3, TxDropped: 4}) {
		t.Errorf("net/dev %+v %v", nets, err)
	}
	if got := h.blockDevice(8, 0); got != "/dev/sda" {
		t.Errorf("device 8:0 is %q", got)
	}
	if got := h.blockDevice(253, 0); got != "253:0" {
		t.Errorf("device 253:0 unknown to sysfs is %q", got)
	}
}

func TestReadCgroupV1Files(t *testing.T) {
	h := fixtureHost(t, "cgroupv1")
	mem, ok := h.readCgroupMemory(4242)
	if !ok || mem.oomKills != 1 || mem.kernel != 3<<20 {
		t.Errorf("memory %+v %v, want memory.oom_control's oom_kill and memory.kmem.usage_in_bytes", mem, ok)
	}
	if p, ok := h.readProcesses(4242); !ok || p.processes != 1 || p.fds != 4 || p.sockets != 1 {
		t.Errorf("processes %+v %v, from the pids hierarchy", p, ok)
	}
}

// dockerStatsV2 is what Docker reports for the cgroup v2 directory dir: containerd's cgroups
// library reads the files (cgroup2/manager.go Stat; utils.go readIoStats, and
// getStatFileContentUint64, for which "max" is the largest uint64) and moby converts them
// (daemon/stats_unix.go statsV2, as in Docker 28.5 and 29.8): cpu.stat from µs to ns, memory.stat under
// the kernel's key names, memory.max capped at the machine's memory, memory.events "oom" as
// Failcnt, io.stat bytes as "read"/"write" entries; no I/O operations, no swap, no "kernel".
func dockerStatsV2(t *testing.T, dir string, machineMemory uint64) container.StatsResponse {
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

// A container on a cgroup v2 node, end to end: Docker's stats as Docker makes them from the
// fixture's files, and what we read of the files ourselves, into CRI stats and metrics.
func TestStatsAndMetricsOnCgroupV2(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetDockerRootDir(t.TempDir())
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	host := fixtureHost(t, "cgroupv2")
	s.stats.host = host
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "v2", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	for _, c := range []string{podID, id} {
		inspect, err := fake.InspectContainer(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		asProcess(t, host, inspect.State.Pid)
	}
	const machineMemory = 8 << 30
	if err := fake.SetStats(id, dockerStatsV2(t, filepath.Join(host.sys, fixtureV2Dir), machineMemory)); err != nil {
		t.Fatal(err)
	}
	// The sandbox on a CNI network: Docker reports no interfaces, /proc/PID/net/dev has them.
	if err := fake.SetStats(podID, container.StatsResponse{PidsStats: container.PidsStats{Current: 1}, MemoryStats: container.MemoryStats{Usage: 1 << 20, Stats: map[string]uint64{"inactive_file": 0}}}); err != nil {
		t.Fatal(err)
	}

	resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	const usage, inactiveFile = 58720256, 8388608
	m := st.Memory
	if m.GetUsageBytes().GetValue() != usage || m.GetWorkingSetBytes().GetValue() != usage-inactiveFile || m.GetRssBytes().GetValue() != 41943040 ||
		m.GetPageFaults().GetValue() != 23456 || m.GetMajorPageFaults().GetValue() != 12 || m.GetAvailableBytes().GetValue() != machineMemory-(usage-inactiveFile) {
		t.Errorf("memory %v: want usage memory.current, working set less inactive_file, rss anon, faults pgfault and pgmajfault", m)
	}
	if st.Cpu.GetUsageCoreNanoSeconds().GetValue() != 2500000*1000 {
		t.Errorf("cpu %v, want cpu.stat usage_usec in ns", st.Cpu)
	}
	if st.Swap.GetSwapUsageBytes() == nil || st.Swap.SwapUsageBytes.Value != 1048576 {
		t.Errorf("swap %v, want memory.swap.current (Docker reports none on v2)", st.Swap)
	}

	pod, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Stats.Linux
	if l.GetProcess().GetProcessCount().GetValue() != 5+1 {
		t.Errorf("pod processes %v, want pids.current plus the sandbox's", l.Process)
	}
	if n := l.GetNetwork().GetDefaultInterface(); n.GetName() != "eth0" || n.GetRxBytes().GetValue() != 12345 || n.GetTxErrors().GetValue() != 3 {
		t.Errorf("pod network %v, want eth0 of the sandbox's /proc/PID/net/dev", l.Network)
	}

	metrics, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil || len(metrics.PodMetrics) != 1 || len(metrics.PodMetrics[0].ContainerMetrics) != 1 {
		t.Fatalf("ListPodSandboxMetrics = %v, %v", metrics, err)
	}
	// The pod's network metrics come from the same /proc/PID/net/dev.
	rx := false
	for _, mt := range metrics.PodMetrics[0].Metrics {
		if mt.Name == "container_network_receive_bytes_total" && slices.Contains(mt.LabelValues, "eth0") {
			rx = mt.Value.GetValue() == 12345
		}
	}
	if !rx {
		t.Errorf("pod metrics %v, want eth0's 12345 received bytes of the sandbox's /proc/PID/net/dev", metrics.PodMetrics[0].Metrics)
	}
	got := map[string]uint64{}
	for _, mt := range metrics.PodMetrics[0].ContainerMetrics[0].Metrics {
		key := mt.Name
		if extra := mt.LabelValues[len(metricBaseLabels):]; len(extra) > 0 {
			key += "{" + strings.Join(extra, ",") + "}"
		}
		got[key] = mt.Value.GetValue()
	}
	for key, want := range map[string]uint64{
		// cpu.stat
		"container_cpu_usage_seconds_total{total}":  2,
		"container_cpu_user_seconds_total":          1,
		"container_cpu_system_seconds_total":        1,
		"container_cpu_cfs_periods_total":           40,
		"container_cpu_cfs_throttled_periods_total": 7,
		"container_cpu_cfs_throttled_seconds_total": 3,
		// memory.current, memory.stat, memory.events, memory.swap.current
		"container_memory_usage_bytes":                          usage,
		"container_memory_working_set_bytes":                    usage - inactiveFile,
		"container_memory_rss":                                  41943040,
		"container_memory_cache":                                12582912,
		"container_memory_mapped_file":                          4194304,
		"container_memory_swap":                                 1048576,
		"container_memory_failcnt":                              3, // memory.events oom, as Docker reports it
		"container_oom_events_total":                            2, // memory.events oom_kill
		"container_memory_kernel_usage":                         2211840,
		"container_memory_failures_total{pgfault,container}":    23456,
		"container_memory_failures_total{pgmajfault,hierarchy}": 12,
		// pids.current, pids.max "max" (no limit: 0, as cAdvisor says)
		"container_threads":     5,
		"container_threads_max": 0,
		// io.stat: bytes from Docker (lowercase ops), operations read here
		"container_blkio_device_usage_total{/dev/sda,8,0,Read}":  1048576,
		"container_blkio_device_usage_total{/dev/sda,8,0,Write}": 4194304,
		"container_blkio_device_usage_total{253:0,253,0,Read}":   2048,
		"container_fs_reads_bytes_total{/dev/sda}":               1048576,
		"container_fs_writes_bytes_total{/dev/sda}":              4194304,
		"container_fs_reads_total{/dev/sda}":                     64,
		"container_fs_writes_total{/dev/sda}":                    128,
		"container_fs_reads_total{253:0}":                        2,
		// cgroup.procs and /proc/PID/fd
		"container_processes":        2,
		"container_file_descriptors": 6,
		"container_sockets":          2,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", key, v, ok, want)
		}
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
		if s.workingSet != tc.workingSet || s.rss != tc.rss || s.pageFaults != tc.pf || s.swap != tc.swaps || s.hasSwap != tc.hasSwap {
			t.Errorf("%s: working set %d rss %d faults %d swap %d (%v), want %d %d %d %d (%v)", tc.name, s.workingSet, s.rss, s.pageFaults, s.swap, s.hasSwap, tc.workingSet, tc.rss, tc.pf, tc.swaps, tc.hasSwap)
		}
	}
}
