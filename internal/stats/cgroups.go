package stats

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
)

// What the node's cgroup and proc filesystems tell about a container beyond Docker's stats:
// OOM kills, kernel memory, processes with their open files and sockets, the interfaces of a
// network namespace Docker does not manage, and, on cgroup v2, swap and I/O operations.
//
// Docker reads cgroup v2 through containerd's cgroups library and converts it (moby
// daemon/stats_unix.go statsV2, read in the source of Docker 28.5 and 29.8; older releases
// convert alike): memory.stat keys as the kernel names them ("anon", "file", "inactive_file",
// "pgfault", ..., no "total_" prefix, no swap), cpu.stat in ns (usage_usec * 1000 ...),
// memory.events "oom" as Failcnt, pids.max "max" as the largest uint64, and io.stat's rbytes
// and wbytes as io_service_bytes_recursive entries with the ops "read" and "write" (lowercase;
// v1 says "Read", "Write", "Total"...). It leaves the rios and wios of io.stat out
// (io_serviced_recursive stays empty) and reports no swap: those two are read here. The layouts
// follow the kernel's Documentation/admin-guide/cgroup-v2.rst and cgroup-v1/; testdata/ holds
// fixtures of both.

// Host is where the node's sysfs and procfs are: /sys and /proc, or fixture directories in
// tests. Cgroups are mounted under sys/fs/cgroup.
type Host struct{ sys, proc string }

// NewHost is the host whose sysfs is at sys and procfs at proc.
func NewHost(sys, proc string) Host { return Host{sys: sys, proc: proc} }

func nodeHost() Host { return Host{sys: "/sys", proc: "/proc"} }

// Proc is where the host's procfs is.
func (h Host) Proc() string { return h.proc }

// Sys is where the host's sysfs is.
func (h Host) Sys() string { return h.sys }

// CgroupRoot is where the node's cgroups are mounted.
func (h Host) CgroupRoot() string { return filepath.Join(h.sys, "fs", "cgroup") }

// cgroupHierarchy is how cgroups are mounted under a root.
type cgroupHierarchy struct {
	// version is 2 when the root is the unified hierarchy (a cgroup v2 node), else 1.
	version int
	// unified is where the unified hierarchy is mounted: the root on v2, root/unified on a v1
	// node in systemd's hybrid mode (which has no controllers there), "" when nowhere.
	unified string
}

// detectCgroupHierarchy tells cgroup v1 from v2 by what is mounted at root: the root of the
// unified hierarchy holds cgroup.controllers; a v1 root is a tmpfs with one directory per
// hierarchy (and, in hybrid mode, the unified one under "unified").
func detectCgroupHierarchy(root string) cgroupHierarchy {
	if isRegular(filepath.Join(root, "cgroup.controllers")) {
		return cgroupHierarchy{version: 2, unified: root}
	}
	h := cgroupHierarchy{version: 1}
	if isRegular(filepath.Join(root, "unified", "cgroup.controllers")) {
		h.unified = filepath.Join(root, "unified")
	}
	return h
}

func isRegular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// cgroupDirs maps the controllers of process pid to their directories, from its
// /proc/PID/cgroup ("ID:CONTROLLERS:PATH" lines): on v1 one per controller ("memory", "pids",
// "name=systemd" ...), under the directory the hierarchy is mounted on (co-mounted controllers
// share one, named "cpu,cpuacct"); the unified hierarchy under the key "" (on v2 it is the only
// one). It also returns the hierarchy.
func (h Host) cgroupDirs(pid int) (map[string]string, cgroupHierarchy, bool) {
	root := h.CgroupRoot()
	hier := detectCgroupHierarchy(root)
	raw, err := os.ReadFile(filepath.Join(h.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, hier, false
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		// Clean keeps the path under the mount, whatever a process's cgroup says.
		path := filepath.Clean(parts[2])
		if parts[1] == "" {
			if hier.unified != "" {
				out[""] = filepath.Join(hier.unified, path)
			}
			continue
		}
		if hier.version == 2 {
			continue
		}
		ctrls := strings.Split(parts[1], ",")
		mount := filepath.Join(root, strings.TrimPrefix(parts[1], "name="))
		if _, err := os.Stat(mount); err != nil && len(ctrls) > 1 {
			mount = filepath.Join(root, ctrls[0]) // mounted one by one, or a symlink lost
		}
		for _, ctrl := range ctrls {
			out[ctrl] = filepath.Join(mount, path)
		}
	}
	return out, hier, len(out) > 0
}

// unifiedDir is the cgroup v2 directory of process pid on a v2 node; "" on v1 (a hybrid
// node's unified hierarchy has no controllers, so no memory or io files).
func (h Host) unifiedDir(pid int) string {
	dirs, hier, ok := h.cgroupDirs(pid)
	if !ok || hier.version != 2 {
		return ""
	}
	return dirs[""]
}

// ProcessCounts are the processes of a container and their open files and sockets.
type ProcessCounts struct{ Processes, FDs, Sockets uint64 }

// Processes counts the processes of the container of pid (from its pids or unified cgroup)
// and their open files and sockets.
func (h Host) Processes(pid int) (ProcessCounts, bool) {
	dirs, _, ok := h.cgroupDirs(pid)
	if !ok {
		return ProcessCounts{}, false
	}
	dir, ok := dirs["pids"]
	if !ok {
		dir, ok = dirs[""]
	}
	if !ok {
		return ProcessCounts{}, false
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return ProcessCounts{}, false
	}
	var c ProcessCounts
	for _, f := range strings.Fields(string(raw)) {
		if _, err := strconv.Atoi(f); err != nil {
			continue
		}
		c.Processes++
		fdDir := filepath.Join(h.proc, f, "fd")
		entries, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			c.FDs++
			if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
				c.Sockets++
			}
		}
	}
	return c, true
}

// CgroupMemory are a container's OOM kills and kernel memory.
type CgroupMemory struct{ OOMKills, Kernel uint64 }

// CgroupMemory reads the OOM kills and kernel memory of the container of pid: on v1 from
// memory.oom_control ("oom_kill N", kernel 4.13+) and memory.kmem.usage_in_bytes; on v2 from
// memory.events ("oom_kill N": processes the OOM killer killed; "oom" counts the times the
// cgroup hit its limit and allocation failed, which Docker reports as Failcnt) and memory.stat
// ("kernel", Linux 5.18+, or the kernel_stack, slab, sock and percpu it sums).
func (h Host) CgroupMemory(pid int) (CgroupMemory, bool) {
	dirs, _, ok := h.cgroupDirs(pid)
	if !ok {
		return CgroupMemory{}, false
	}
	var out CgroupMemory
	if dir, ok := dirs["memory"]; ok { // cgroup v1
		kv := readKeyValues(filepath.Join(dir, "memory.oom_control"))
		out.OOMKills = kv["oom_kill"]
		raw, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes"))
		if err != nil {
			return out, kv != nil
		}
		out.Kernel, _ = strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
		return out, true
	}
	dir, ok := dirs[""]
	if !ok {
		return out, false
	}
	events := readKeyValues(filepath.Join(dir, "memory.events"))
	if events == nil {
		return out, false
	}
	out.OOMKills = events["oom_kill"]
	st := readKeyValues(filepath.Join(dir, "memory.stat"))
	if v, ok := st["kernel"]; ok {
		out.Kernel = v
	} else {
		out.Kernel = st["kernel_stack"] + st["slab"] + st["sock"] + st["percpu"]
	}
	return out, true
}

// readCgroupV2Swap reads memory.swap.current of a cgroup v2 directory: the swap its processes
// use. Missing without swap accounting.
func readCgroupV2Swap(dir string) (uint64, bool) {
	return readUint(filepath.Join(dir, "memory.swap.current"))
}

// IOStat is one device's line of a cgroup v2 io.stat.
type IOStat struct{ Major, Minor, RBytes, WBytes, RIOs, WIOs uint64 }

// readCgroupV2IO parses io.stat of a cgroup v2 directory: one line per device,
// "MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N" (discards from Linux 5.2, and keys
// the kernel may add later, are skipped).
func readCgroupV2IO(dir string) ([]IOStat, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "io.stat"))
	if err != nil {
		return nil, false
	}
	var out []IOStat
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		maj, min, ok := strings.Cut(f[0], ":")
		if !ok {
			continue
		}
		var e IOStat
		var err1, err2 error
		e.Major, err1 = strconv.ParseUint(maj, 10, 64)
		e.Minor, err2 = strconv.ParseUint(min, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				e.RBytes = n
			case "wbytes":
				e.WBytes = n
			case "rios":
				e.RIOs = n
			case "wios":
				e.WIOs = n
			}
		}
		out = append(out, e)
	}
	return out, true
}

// readKeyValues reads a cgroup file of "key value" lines (memory.stat, memory.events,
// cpu.stat, memory.oom_control); nil when it cannot be read.
func readKeyValues(path string) map[string]uint64 {
	return readKeys(path, nil)
}

// readKeys is readKeyValues keeping only the keys of want (every key when nil).
func readKeys(path string, want map[string]bool) map[string]uint64 {
	var buf [4096]byte
	raw, err := readCgroupFile(path, buf[:])
	if err != nil {
		return nil
	}
	out := make(map[string]uint64, len(want))
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte("\n"))
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok || (want != nil && !want[string(k)]) {
			continue
		}
		out[string(k)], _ = strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
	}
	return out
}

// NetDev reads the interface counters of the network namespace process pid is in, for
// pods whose network Docker does not manage (CNI): Docker reports no interfaces for them.
func (h Host) NetDev(pid int) (map[string]container.NetworkStats, error) {
	raw, err := os.ReadFile(filepath.Join(h.proc, strconv.Itoa(pid), "net", "dev"))
	if err != nil {
		return nil, err
	}
	out := map[string]container.NetworkStats{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "lo" || len(f) < 16 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out[name] = container.NetworkStats{
			RxBytes: n(0), RxPackets: n(1), RxErrors: n(2), RxDropped: n(3),
			TxBytes: n(8), TxPackets: n(9), TxErrors: n(10), TxDropped: n(11),
		}
	}
	return out, nil
}

// BlockDevice names a block device by its numbers, as the node calls it (/dev/vda), from
// sys/dev/block/MAJ:MIN/uevent; "MAJ:MIN" when sysfs does not know it.
func (h Host) BlockDevice(major, minor uint64) string {
	id := strconv.FormatUint(major, 10) + ":" + strconv.FormatUint(minor, 10)
	raw, err := os.ReadFile(filepath.Join(h.sys, "dev", "block", id, "uevent"))
	if err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if name, ok := strings.CutPrefix(line, "DEVNAME="); ok {
				return "/dev/" + name
			}
		}
	}
	return id
}
