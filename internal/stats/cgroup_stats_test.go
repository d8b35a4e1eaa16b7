package stats

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
	"github.com/docker/docker/api/types/container"
)

const statsID = "9ab5ad761a7c7a58a4d75ec926468719bd7bf36bf38e661da0840d2c345e637c"

// writeTree writes files (path relative to root: content) and returns the Host rooted there.
func writeTree(t testing.TB, files map[string]string) Host {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{sys: filepath.Join(root, "sys"), proc: filepath.Join(root, "proc")}
}

// cgroupV1Files is a container's cgroup v1 as this CI machine has it (cpu and cpuacct mounted
// apart), with the figures Docker 20.10 reported for the same container in one run.
func cgroupV1Files(id string, pid int) map[string]string {
	p := "proc/" + strconv.Itoa(pid) + "/"
	c := "sys/fs/cgroup/"
	d := "/docker/" + id + "/"
	return map[string]string{
		p + "cgroup":                                                  "9:name=systemd:/docker/" + id + "\n8:pids:/docker/" + id + "\n7:blkio:/docker/" + id + "\n4:memory:/docker/" + id + "\n2:cpuacct:/docker/" + id + "\n1:cpu:/docker/" + id + "\n0::/docker/" + id + "\n",
		p + "net/dev":                                                 "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  eth0:     200       2    0    0    0     0          0         0       42       1    0    0    0     0       0          0\n",
		"proc/meminfo":                                                "MemTotal:       24684084 kB\nMemFree:        20000000 kB\n",
		c + "unified/cgroup.controllers":                              "",
		c + "cpuacct" + d + "cpuacct.usage":                           "29683269\n",
		c + "cpuacct" + d + "cpuacct.usage_percpu":                    "11334913 18348356 \n",
		c + "cpuacct" + d + "cpuacct.stat":                            "user 1\nsystem 1\n",
		c + "cpu" + d + "cpu.stat":                                    "nr_periods 10\nnr_throttled 2\nthrottled_time 3000\n",
		c + "memory" + d + "memory.usage_in_bytes":                    "663552\n",
		c + "memory" + d + "memory.max_usage_in_bytes":                "4345856\n",
		c + "memory" + d + "memory.failcnt":                           "0\n",
		c + "memory" + d + "memory.limit_in_bytes":                    "9223372036854771712\n",
		c + "memory" + d + "memory.stat":                              "cache 0\nrss 118784\ninactive_file 0\npgfault 1216\ntotal_rss 118784\ntotal_inactive_file 0\ntotal_pgfault 1216\n",
		c + "blkio" + d + "blkio.io_service_bytes_recursive":          "Total 0\n",
		c + "blkio" + d + "blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\nTotal 12288\n",
		c + "blkio" + d + "blkio.io_serviced_recursive":               "Total 0\n",
		c + "blkio" + d + "blkio.throttle.io_serviced_recursive":      "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
		c + "pids" + d + "pids.current":                               "1\n",
		c + "pids" + d + "pids.max":                                   "max\n",
	}
}

// On cgroup v1 the reading is what Docker's stats say: the same fields, in the same units, the
// limit capped at MemTotal, the throttle blkio files where the CFQ ones are empty.
func TestContainerStatsFromCgroupV1AreDockers(t *testing.T) {
	h := writeTree(t, cgroupV1Files(statsID, 4242))
	cg, ok := h.containerCgroupsOf(statsID, 4242)
	if !ok {
		t.Fatal("the container's cgroups not found")
	}
	st, ok := h.readContainerStats(cg, 4242, true, h.memTotal(), true)
	if !ok {
		t.Fatal("not read")
	}
	if st.Read.IsZero() {
		t.Errorf("read at %v", st.Read)
	}
	wantCPU := container.CPUStats{
		CPUUsage:       container.CPUUsage{TotalUsage: 29683269, UsageInKernelmode: 10000000, UsageInUsermode: 10000000},
		ThrottlingData: container.ThrottlingData{Periods: 10, ThrottledPeriods: 2, ThrottledTime: 3000},
	}
	if !reflect.DeepEqual(st.CPUStats, wantCPU) {
		t.Errorf("cpu %+v, want %+v", st.CPUStats, wantCPU)
	}
	m := st.MemoryStats
	if m.Usage != 663552 || m.MaxUsage != 4345856 || m.Limit != 24684084<<10 || m.Stats["total_rss"] != 118784 || m.Stats["pgfault"] != 1216 {
		t.Errorf("memory %+v", m)
	}
	wantIO := []container.BlkioStatEntry{{Major: 8, Minor: 0, Op: "Read", Value: 4096}, {Major: 8, Minor: 0, Op: "Write", Value: 8192}, {Major: 8, Minor: 0, Op: "Total", Value: 12288}}
	if !reflect.DeepEqual(st.BlkioStats.IoServiceBytesRecursive, wantIO) || len(st.BlkioStats.IoServicedRecursive) != 3 || st.BlkioStats.IoServicedRecursive[1].Value != 2 {
		t.Errorf("blkio %+v", st.BlkioStats)
	}
	if st.PidsStats != (container.PidsStats{Current: 1, Limit: 0}) {
		t.Errorf("pids %+v, want 1 and no limit (0)", st.PidsStats)
	}
	if n := st.Networks; len(n) != 1 || n["eth0"].RxBytes != 200 || n["eth0"].TxBytes != 42 {
		t.Errorf("networks %+v, want eth0 alone", n)
	}
	// A container sharing another's network (or the host's) reports none, as Docker does.
	if st, _ := h.readContainerStats(cg, 4242, false, 0, true); st.Networks != nil || st.MemoryStats.Limit != 9223372036854771712 {
		t.Errorf("networks %+v of a container without a network of its own, limit %d (no MemTotal: not capped)", st.Networks, st.MemoryStats.Limit)
	}
}

// On cgroup v2: cpu.stat in ns, memory.max "max" as the largest uint64 then MemTotal, io.stat
// as read and write entries, pids.max "max" as the largest uint64.
func TestContainerStatsFromCgroupV2AreDockers(t *testing.T) {
	d := "sys/fs/cgroup/system.slice/docker-" + statsID + ".scope/"
	h := writeTree(t, map[string]string{
		"proc/77/cgroup":                   "0::/system.slice/docker-" + statsID + ".scope\n",
		"proc/meminfo":                     "MemTotal: 1000 kB\n",
		"sys/fs/cgroup/cgroup.controllers": "cpu memory io pids\n",
		d + "cpu.stat":                     "usage_usec 2000\nuser_usec 1500\nsystem_usec 500\nnr_periods 4\nnr_throttled 1\nthrottled_usec 7\n",
		d + "memory.current":               "4096\n",
		d + "memory.max":                   "max\n",
		d + "memory.events":                "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n",
		d + "memory.stat":                  "anon 1024\nfile 2048\ninactive_file 512\npgfault 9\n",
		d + "io.stat":                      "8:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0\n",
		d + "pids.current":                 "3\n",
		d + "pids.max":                     "max\n",
	})
	cg, ok := h.containerCgroupsOf(statsID, 77)
	if !ok {
		t.Fatal("the container's cgroups not found")
	}
	st, ok := h.readContainerStats(cg, 77, false, h.memTotal(), true)
	if !ok {
		t.Fatal("not read")
	}
	u := st.CPUStats.CPUUsage
	if u.TotalUsage != 2000000 || u.UsageInUsermode != 1500000 || u.UsageInKernelmode != 500000 || st.CPUStats.ThrottlingData != (container.ThrottlingData{Periods: 4, ThrottledPeriods: 1, ThrottledTime: 7000}) {
		t.Errorf("cpu %+v", st.CPUStats)
	}
	if m := st.MemoryStats; m.Usage != 4096 || m.Limit != 1000<<10 || m.Failcnt != 2 || m.Stats["inactive_file"] != 512 {
		t.Errorf("memory %+v", m)
	}
	wantIO := []container.BlkioStatEntry{{Major: 8, Minor: 0, Op: "read", Value: 100}, {Major: 8, Minor: 0, Op: "write", Value: 200}}
	if !reflect.DeepEqual(st.BlkioStats.IoServiceBytesRecursive, wantIO) {
		t.Errorf("io %+v", st.BlkioStats.IoServiceBytesRecursive)
	}
	if st.PidsStats != (container.PidsStats{Current: 3, Limit: math.MaxUint64}) {
		t.Errorf("pids %+v", st.PidsStats)
	}
	// A cgroup with no task left (the container ended) is not read: Docker is asked.
	if err := os.WriteFile(filepath.Join(h.sys, "fs/cgroup/system.slice/docker-"+statsID+".scope/pids.current"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.readContainerStats(cg, 77, false, 0, true); ok {
		t.Error("read the stats of a cgroup v2 with no task")
	}
}

// Not read, so that Docker is asked: a process in another container's cgroup (a PID reused after
// the container ended), a process gone, a file Docker's stats need missing, a cgroup left with
// no task (the container ended).
func TestContainerStatsAreNotReadFromAnotherCgroup(t *testing.T) {
	other := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h := writeTree(t, cgroupV1Files(other, 4242))
	if _, ok := h.containerCgroupsOf(statsID, 4242); ok {
		t.Error("took another container's cgroups")
	}
	if _, ok := h.containerCgroupsOf(other, 4343); ok {
		t.Error("took the cgroups of a process that is gone")
	}
	for name, edit := range map[string]func(map[string]string){
		"no memory.usage_in_bytes": func(f map[string]string) { delete(f, "sys/fs/cgroup/memory/docker/"+statsID+"/memory.usage_in_bytes") },
		"no task left":             func(f map[string]string) { f["sys/fs/cgroup/pids/docker/"+statsID+"/pids.current"] = "0\n" },
	} {
		files := cgroupV1Files(statsID, 4242)
		edit(files)
		h := writeTree(t, files)
		cg, ok := h.containerCgroupsOf(statsID, 4242)
		if !ok {
			t.Fatalf("%s: the container's cgroups not found", name)
		}
		if _, ok := h.readContainerStats(cg, 4242, true, 0, true); ok {
			t.Errorf("%s: read", name)
		}
	}
}

// The collector reads a container's cgroups instead of asking Docker, and the samples carry
// what the cgroups say; where the cgroups are not the container's, Docker is asked.
func TestStatsAreReadFromTheCgroupsWithoutDocker(t *testing.T) {
	fake := newFake()
	ctx := context.Background()
	sandbox := startedContainer(t, fake, "sandbox")
	id := startedContainer(t, fake, "c")
	c, err := fake.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	col := testCollector(t, fake, Config{Host: writeTree(t, cgroupV1Files(id, c.State.Pid))})
	snap, ok := col.Collect(ctx, []string{id}, true)[id]
	if !ok {
		t.Fatal("no sample")
	}
	if n := fake.Calls("ContainerStats"); n != 0 {
		t.Errorf("%d Docker stats calls for a container whose cgroups we read", n)
	}
	if got := snap.Cur.CPUTotal; got != 29683269 {
		t.Errorf("cpu %d, want cpuacct.usage 29683269", got)
	}
	if got := snap.Cur.MemUsage; got != 663552 {
		t.Errorf("memory usage %d, want 663552", got)
	}
	// The pod's sandbox has no cgroups in the fixture: Docker is asked for it.
	if _, ok := col.Collect(ctx, []string{sandbox}, true)[sandbox]; !ok {
		t.Fatal("no sample of the sandbox")
	}
	if n := fake.Calls("ContainerStats"); n != 1 {
		t.Errorf("%d Docker stats calls, want 1: the sandbox's", n)
	}
}

// Without a pids controller the stats are read, with no pids as Docker gives, while the cgroup
// has a task; not once it has none.
func TestContainerStatsWithoutAPidsController(t *testing.T) {
	for tasks, want := range map[string]bool{"4242\n": true, "": false} {
		files := cgroupV1Files(statsID, 4242)
		delete(files, "sys/fs/cgroup/pids/docker/"+statsID+"/pids.current")
		delete(files, "sys/fs/cgroup/pids/docker/"+statsID+"/pids.max")
		files["proc/4242/cgroup"] = "4:memory:/docker/" + statsID + "\n2:cpuacct:/docker/" + statsID + "\n"
		files["sys/fs/cgroup/cpuacct/docker/"+statsID+"/tasks"] = tasks
		h := writeTree(t, files)
		cg, ok := h.containerCgroupsOf(statsID, 4242)
		if !ok {
			t.Fatal("the container's cgroups not found")
		}
		st, ok := h.readContainerStats(cg, 4242, false, 0, true)
		if ok != want || st.PidsStats != (container.PidsStats{}) {
			t.Errorf("tasks %q: read %v, pids %+v; want read %v and no pids", tasks, ok, st.PidsStats, want)
		}
	}
}

// The figures only the CRI metrics report are read for the containers the metrics asked about,
// not for the kubelet's stats calls every 10 s: a stats call reads the CRI's figures alone (the
// same as a full read), a metrics call then refreshes the sample with the metrics' figures, and
// the container's later refreshes keep them.
func TestMetricsFiguresAreReadOnlyForTheMetrics(t *testing.T) {
	h := writeTree(t, cgroupV1Files(statsID, 4242))
	cg, _ := h.containerCgroupsOf(statsID, 4242)
	full, ok1 := h.readContainerStats(cg, 4242, false, 0, true)
	lite, ok2 := h.readContainerStats(cg, 4242, false, 0, false)
	if !ok1 || !ok2 {
		t.Fatalf("read: %v %v", ok1, ok2)
	}
	cri := func(st container.StatsResponse) Sample {
		s := *sampleFromDocker(st)
		s.At, s.Raw = time.Time{}, nil
		return s
	}
	if l, f := cri(lite), cri(full); !reflect.DeepEqual(l, f) || l.PageFaults != 1216 || l.RSS != 118784 {
		t.Errorf("the CRI's figures differ: without the metrics %+v, with %+v", l, f)
	}
	if lite.CPUStats.CPUUsage.UsageInUsermode != 0 || lite.CPUStats.ThrottlingData.Periods != 0 || lite.MemoryStats.MaxUsage != 0 ||
		lite.BlkioStats.IoServiceBytesRecursive != nil {
		t.Errorf("metrics' figures read for the CRI stats: %+v", lite)
	}

	fake := newFake()
	ctx := context.Background()
	id := startedContainer(t, fake, "m")
	c, err := fake.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	col := testCollector(t, fake, Config{Host: writeTree(t, cgroupV1Files(id, c.State.Pid))})
	sample := func() *Sample {
		col.mu.Lock()
		defer col.mu.Unlock()
		return col.entries[id].cur
	}
	col.Collect(ctx, []string{id}, true) // the stats RPCs
	if cur := sample(); cur.forMetrics || cur.Raw.BlkioStats.IoServiceBytesRecursive != nil {
		t.Fatalf("after a stats call: a sample with the metrics' figures (%+v)", cur.Raw.BlkioStats)
	}
	snap := col.Collect(ctx, []string{id}, false)[id] // the CRI metrics
	if periods := snap.Cur.Raw.CPUStats.ThrottlingData.Periods; periods != 10 {
		t.Errorf("throttling periods %d, want cpu.stat's 10", periods)
	}
	before := sample()
	col.tick(time.Now().Add(time.Hour / 60)) // a background refresh, a minute on
	waitRefreshed(t, col, id, before)
	if cur := sample(); !cur.forMetrics || len(cur.Raw.BlkioStats.IoServiceBytesRecursive) == 0 {
		t.Errorf("a refresh after the metrics asked: no metrics' figures (%+v)", cur.Raw.BlkioStats)
	}
}

// waitRefreshed waits (bounded) for the refresh of id that a tick started to end: the one in
// progress, or one that ended already (on a busy machine it may end before the test looks),
// which replaced the sample before.
func waitRefreshed(t *testing.T, c *Collector, id string, before *Sample) {
	t.Helper()
	c.mu.Lock()
	e := c.entries[id]
	ch, cur, lastErr := e.inflight, e.cur, e.lastErr
	c.mu.Unlock()
	if ch == nil {
		if cur == before {
			t.Fatalf("no refresh started, or it failed (%v)", lastErr)
		}
		return
	}
	select {
	case <-ch:
	case <-time.After(testutil.Scaled(10 * time.Second)):
		t.Fatal("the refresh did not end")
	}
}

// Cgroup files longer than the reader's first buffer are read whole (a memory.stat of a
// kernel with many counters, a number padded past 64 bytes), and a key filter keeps only its
// keys.
func TestCgroupFilesLongerThanTheBufferAreReadWhole(t *testing.T) {
	var stat strings.Builder
	for i := range 600 {
		fmt.Fprintf(&stat, "counter_%d %d\n", i, i)
	}
	h := writeTree(t, map[string]string{"sys/memory.stat": stat.String(), "sys/pids.current": strings.Repeat(" ", 100) + "42\n"})
	kv := readKeyValues(filepath.Join(h.sys, "memory.stat"))
	if len(kv) != 600 || kv["counter_599"] != 599 {
		t.Errorf("%d keys, last %d; want 600 and 599 (a file of %d bytes)", len(kv), kv["counter_599"], stat.Len())
	}
	if kept := readKeys(filepath.Join(h.sys, "memory.stat"), map[string]bool{"counter_0": true, "counter_598": true}); len(kept) != 2 || kept["counter_598"] != 598 {
		t.Errorf("kept %v", kept)
	}
	if v, ok := readUint(filepath.Join(h.sys, "pids.current")); !ok || v != 42 {
		t.Errorf("readUint of a padded number: %d, %v", v, ok)
	}
	if _, ok := readUint(filepath.Join(h.sys, "missing")); ok {
		t.Error("readUint of a missing file: ok")
	}
}

// BenchmarkReadStatsV1 is one container's stats read from a cgroup v1 fixture: what the kubelet's
// stats calls cost per container (cri) and what the CRI metrics add (metrics).
func BenchmarkReadStatsV1(b *testing.B) {
	h := writeTree(b, cgroupV1Files(statsID, 4242))
	cg, _ := h.containerCgroupsOf(statsID, 4242)
	for _, full := range []bool{false, true} {
		name := "cri"
		if full {
			name = "metrics"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, ok := h.readContainerStats(cg, 4242, false, 0, full); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
