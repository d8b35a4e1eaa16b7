package stats

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
)

// A container's stats read straight from its cgroups, in the shape Docker's stats API gives
// them. Docker's one-shot stats cost dockerd, containerd and the container's shim about 10 ms of
// CPU each (measured here on Docker 20.10), and the kubelet asks for every container every 10 s:
// on a node of 100 pods that is most of dockerd's idle CPU. containerd and CRI-O read the
// cgroups themselves; so do we, wherever the container's process is in a cgroup of that
// container (its ID in the cgroup's path, as with Docker's cgroupfs and systemd drivers), and ask
// Docker otherwise (a cri-dockerd that does not see the host's /proc, an unknown layout).
//
// The conversion is Docker's (moby daemon/stats_unix.go, read in the source of Docker 20.10,
// 28.5 and 29.8): on v1, cpuacct.usage, cpuacct.stat's user and system ticks in ns, cpu.stat's
// throttling, memory.usage_in_bytes, max_usage_in_bytes, failcnt and limit_in_bytes, memory.stat as is, blkio's recursive service bytes and operations (the CFQ
// files, else the throttle ones), pids.current and pids.max ("max" is 0); on v2 cpu.stat in ns,
// memory.current, memory.max ("max" is the largest uint64), memory.events "oom" as Failcnt,
// memory.stat as is, io.stat's rbytes and wbytes as "read" and "write" entries, pids.current and
// pids.max ("max" is the largest uint64). Docker's collector caps the memory limit at the node's
// MemTotal, and so do we. Networks are the interfaces of the container's own network namespace
// (/proc/PID/net/dev, without lo), read only for a container with a network of its own. Docker's
// per-CPU usage is left out: nothing we report uses it.

// userHZ is the unit of cpuacct.stat: USER_HZ, 100 on every Linux architecture Docker runs on.
const userHZ = 100

// containerCgroups is where a container's cgroup files are: per v1 controller (or "" for
// the v2 directory), resolved once from its process's /proc/PID/cgroup.
type containerCgroups struct {
	version int
	dirs    map[string]string
}

// containerCgroupsOf resolves the cgroups of container id from its process pid; ok is false
// when pid is not in cgroups named after id (gone, reused, or a layout we do not know).
func (h Host) containerCgroupsOf(id string, pid int) (containerCgroups, bool) {
	if pid <= 0 || id == "" {
		return containerCgroups{}, false
	}
	dirs, hier, ok := h.cgroupDirs(pid)
	if !ok {
		return containerCgroups{}, false
	}
	cg := containerCgroups{version: hier.version, dirs: dirs}
	if cg.version == 2 {
		ok = ofContainer(dirs[""], id)
	} else {
		ok = ofContainer(dirs["cpuacct"], id) && ofContainer(dirs["memory"], id)
	}
	return cg, ok
}

// readContainerStats reads the stats of the container whose cgroups are cg, and the interfaces
// of process pid's network namespace when ownNetwork; memTotal caps the memory limit (0: no
// cap). ok is false when a file Docker's stats need is missing, or the cgroup holds no task (the
// container ended; its cgroup may linger a moment): Docker is asked then.
//
// Without forMetrics, only what the CRI stats report is read (CPU usage, memory usage, limit
// and memory.stat, the task count): 5 files of v1's 14. The kubelet asks for every container's
// stats every 10 s; the CRI metrics (user and system CPU, throttling, failcnt, peak usage,
// block I/O, the pids limit) are asked for by few nodes.
func (h Host) readContainerStats(cg containerCgroups, pid int, ownNetwork bool, memTotal uint64, forMetrics bool) (container.StatsResponse, bool) {
	var st container.StatsResponse
	st.Read = time.Now()
	var ok bool
	if cg.version == 2 {
		ok = readStatsV2(cg.dirs[""], &st, forMetrics)
	} else {
		ok = readStatsV1(cg.dirs, &st, forMetrics)
	}
	if !ok {
		return container.StatsResponse{}, false
	}
	if memTotal > 0 && st.MemoryStats.Limit > memTotal {
		st.MemoryStats.Limit = memTotal
	}
	if ownNetwork {
		if nets, err := h.NetDev(pid); err == nil {
			st.Networks = nets
		}
	}
	return st, true
}

// ofContainer reports whether a cgroup directory is container id's: Docker names it after the
// container (cgroupfs /docker/ID, systemd docker-ID.scope).
func ofContainer(dir, id string) bool {
	return dir != "" && strings.Contains(filepath.Base(dir), id)
}

// readStatsV1 and readStatsV2 fill st from a container's cgroup files; false when one Docker's
// stats need is missing or no task is left in the cgroup.
func readStatsV1(dirs map[string]string, st *container.StatsResponse, forMetrics bool) bool {
	cpuacct, mem, pids := dirs["cpuacct"], dirs["memory"], dirs["pids"]
	total, ok := readUint(filepath.Join(cpuacct, "cpuacct.usage"))
	if !ok {
		return false
	}
	cpu := &st.CPUStats
	cpu.CPUUsage.TotalUsage = total
	if forMetrics {
		ticks := readKeyValues(filepath.Join(cpuacct, "cpuacct.stat"))
		cpu.CPUUsage.UsageInUsermode = ticks["user"] * (uint64(time.Second) / userHZ)
		cpu.CPUUsage.UsageInKernelmode = ticks["system"] * (uint64(time.Second) / userHZ)
		if dir := dirs["cpu"]; dir != "" {
			th := readKeyValues(filepath.Join(dir, "cpu.stat"))
			cpu.ThrottlingData = container.ThrottlingData{Periods: th["nr_periods"], ThrottledPeriods: th["nr_throttled"], ThrottledTime: th["throttled_time"]}
		}
	}

	m := &st.MemoryStats
	if m.Usage, ok = readUint(filepath.Join(mem, "memory.usage_in_bytes")); !ok {
		return false
	}
	m.Limit, _ = readUint(filepath.Join(mem, "memory.limit_in_bytes"))
	if m.Stats = readMemoryStat(filepath.Join(mem, "memory.stat"), forMetrics); m.Stats == nil {
		return false
	}
	if forMetrics {
		m.MaxUsage, _ = readUint(filepath.Join(mem, "memory.max_usage_in_bytes"))
		m.Failcnt, _ = readUint(filepath.Join(mem, "memory.failcnt"))
		if dir := dirs["blkio"]; dir != "" {
			st.BlkioStats.IoServiceBytesRecursive = readBlkio(dir, "io_service_bytes_recursive")
			st.BlkioStats.IoServicedRecursive = readBlkio(dir, "io_serviced_recursive")
		}
	}
	if pids == "" {
		// No pids controller: Docker reports no pids; the tasks tell whether it still runs.
		tasks, err := os.ReadFile(filepath.Join(cpuacct, "tasks"))
		return err == nil && len(bytes.TrimSpace(tasks)) > 0
	}
	st.PidsStats.Current, _ = readUint(filepath.Join(pids, "pids.current"))
	if forMetrics {
		st.PidsStats.Limit, _ = readUint(filepath.Join(pids, "pids.max")) // "max": 0
	}
	return st.PidsStats.Current > 0
}

// readBlkio reads blkio.NAME ("MAJ:MIN Op value" lines), or blkio.throttle.NAME when the CFQ
// file has no device lines (no CFQ scheduler: the kernel's blk-mq).
func readBlkio(dir, name string) []container.BlkioStatEntry {
	for _, file := range []string{"blkio." + name, "blkio.throttle." + name} {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			continue
		}
		var out []container.BlkioStatEntry
		for _, line := range strings.Split(string(raw), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 {
				continue // "Total N"
			}
			maj, min, ok := strings.Cut(f[0], ":")
			if !ok {
				continue
			}
			major, err1 := strconv.ParseUint(maj, 10, 64)
			minor, err2 := strconv.ParseUint(min, 10, 64)
			v, err3 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			out = append(out, container.BlkioStatEntry{Major: major, Minor: minor, Op: f[1], Value: v})
		}
		if len(out) > 0 {
			return out
		}
	}
	return []container.BlkioStatEntry{}
}

func readStatsV2(dir string, st *container.StatsResponse, forMetrics bool) bool {
	cs := readKeyValues(filepath.Join(dir, "cpu.stat"))
	if _, ok := cs["usage_usec"]; !ok {
		return false
	}
	const usec = uint64(time.Microsecond)
	cpu := &st.CPUStats
	cpu.CPUUsage.TotalUsage = cs["usage_usec"] * usec
	cpu.CPUUsage.UsageInUsermode = cs["user_usec"] * usec
	cpu.CPUUsage.UsageInKernelmode = cs["system_usec"] * usec
	cpu.ThrottlingData = container.ThrottlingData{Periods: cs["nr_periods"], ThrottledPeriods: cs["nr_throttled"], ThrottledTime: cs["throttled_usec"] * usec}

	m := &st.MemoryStats
	var ok bool
	if m.Usage, ok = readUint(filepath.Join(dir, "memory.current")); !ok {
		return false
	}
	m.Limit = readMax(filepath.Join(dir, "memory.max"))
	if m.Stats = readMemoryStat(filepath.Join(dir, "memory.stat"), forMetrics); m.Stats == nil {
		return false
	}
	if forMetrics {
		m.Failcnt = readKeyValues(filepath.Join(dir, "memory.events"))["oom"]
		st.BlkioStats.IoServiceBytesRecursive = []container.BlkioStatEntry{}
		if ios, ok := readCgroupV2IO(dir); ok {
			for _, e := range ios {
				st.BlkioStats.IoServiceBytesRecursive = append(st.BlkioStats.IoServiceBytesRecursive,
					container.BlkioStatEntry{Major: e.Major, Minor: e.Minor, Op: "read", Value: e.RBytes},
					container.BlkioStatEntry{Major: e.Major, Minor: e.Minor, Op: "write", Value: e.WBytes})
			}
		}
		st.PidsStats.Limit = readMax(filepath.Join(dir, "pids.max"))
	}
	st.PidsStats.Current, _ = readUint(filepath.Join(dir, "pids.current"))
	return st.PidsStats.Current > 0
}

// criMemoryStat are the memory.stat keys the CRI stats report (sampleFromDocker), v1's and v2's.
var criMemoryStat = map[string]bool{
	"total_inactive_file": true, "inactive_file": true, "total_rss": true, "anon": true,
	"total_pgfault": true, "pgfault": true, "total_pgmajfault": true, "pgmajfault": true,
	"total_swap": true, "swap": true,
}

// readMemoryStat reads memory.stat: every key for the CRI metrics, else those of criMemoryStat.
func readMemoryStat(path string, forMetrics bool) map[string]uint64 {
	if forMetrics {
		return readKeyValues(path)
	}
	return readKeys(path, criMemoryStat)
}

// readCgroupFile reads a small cgroup (or proc) file into buf, grown as needed: open, read to
// the end, close. os.ReadFile also stats the file for a size, which cgroup files do not have:
// the kubelet's stats of every container every 10 s are thousands of such reads.
func readCgroupFile(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readUint reads a cgroup file holding one number.
func readUint(path string) (uint64, bool) {
	var buf [64]byte
	raw, err := readCgroupFile(path, buf[:])
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
	return v, err == nil
}

// readMax reads a cgroup v2 limit: a number, or "max" (no limit) as the largest uint64.
func readMax(path string) uint64 {
	var buf [64]byte
	raw, err := readCgroupFile(path, buf[:])
	if err != nil {
		return 0
	}
	s := bytes.TrimSpace(raw)
	if string(s) == "max" {
		return math.MaxUint64
	}
	v, _ := strconv.ParseUint(string(s), 10, 64)
	return v
}

// memTotal is the node's memory (MemTotal of /proc/meminfo) in bytes; 0 when unknown.
func (h Host) memTotal() uint64 {
	raw, err := os.ReadFile(filepath.Join(h.proc, "meminfo"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseUint(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}
