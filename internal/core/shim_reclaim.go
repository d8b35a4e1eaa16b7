package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// A start that fails inside the runtime can leave the runtime running. gVisor's `runsc create`
// starts the sandbox and its gofer; when `runsc start` then fails, containerd keeps the task
// "created" under its shim. Docker 20.10 deletes the task without a kill, which containerd
// refuses for a created task; Docker 29 kills it first, which runsc (20221219) refuses for a
// created container. docker kill and stop refuse a container that is not running, and docker
// rm drops only Docker's record: the shim and the runtime's processes stay for ever, one set per
// retry of the kubelet. What reclaims them is the end of the shim: containerd cleans up after a
// dead shim by running the shim's delete command, which runs the runtime's `delete --force`.
// So after such a failure, the shim that serves this container alone (its -id is the
// container's; a shim that Docker 29 shares among a pod's containers, by their sandbox-id
// annotation, has the sandbox's) is killed, and the call waits until it and what it ran are gone,
// and containerd's cleanup has run: it removes the task's bundle directory (the shim's working
// directory) last. Until containerd has noticed the dead shim, nothing of the cleanup runs yet:
// on a busy machine that takes a while, and the cleanup's own runtime processes come after.

// reclaimTimeout bounds the wait for containerd's cleanup after the shim is killed.
const reclaimTimeout = 10 * time.Second

// reclaimFailedStart ends the shim of container id and the runtime processes under it after
// a start that failed inside the runtime (libdocker.ErrRuntimeFailed). It needs the host's
// /proc (cri-dockerd in the host's PID namespace, as a node service runs); where it sees no
// shim of the container, it does nothing.
func (s *Service) reclaimFailedStart(ctx context.Context, id string, startErr error) {
	if !errors.Is(startErr, libdocker.ErrRuntimeFailed) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reclaimTimeout)
	defer cancel()
	log := s.log.WithField("id", id)
	start := time.Now()
	ended, err := reclaimShim(ctx, "/proc", id, unix.Kill)
	switch {
	case err != nil:
		log.Warnf("end the runtime's processes a failed start left: %v", err)
	case ended > 0:
		log.Infof("ended the containerd shim and %d runtime processes a failed start left running (containerd's cleanup took %v)", ended-1, time.Since(start).Round(time.Millisecond))
	}
}

// reclaimShim kills the containerd shim whose -id is id and waits until it, every process
// that descended from it and containerd's cleanup (the shim's delete command and the runtime's
// delete, which name the container) are gone. Processes of the shim's tree still there when
// ctx ends (containerd's cleanup did not come) are killed directly. It returns how many
// processes of the shim's tree ended.
func reclaimShim(ctx context.Context, procRoot, id string, kill func(pid int, sig unix.Signal) error) (int, error) {
	procs := readProcesses(procRoot)
	shim, ok := shimOf(procs, id)
	if !ok {
		return 0, nil
	}
	tree := append([]process{shim}, descendants(procs, shim.pid)...)
	bundle := bundleOf(procRoot, shim.pid, id)
	if err := kill(shim.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return 0, fmt.Errorf("kill shim %d: %w", shim.pid, err)
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		procs = readProcesses(procRoot)
		alive := stillRunning(procs, tree)
		cleanup := naming(procs, id)
		bundleLeft := bundle != "" && exists(bundle)
		if len(alive) == 0 && len(cleanup) == 0 && !bundleLeft {
			return len(tree), nil
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		if len(alive) == 0 && len(cleanup) > 0 {
			return len(tree), fmt.Errorf("containerd's cleanup after the shim %d of %.12s still runs (%s)", shim.pid, id, pidList(cleanup))
		}
		if len(alive) == 0 {
			return len(tree), fmt.Errorf("containerd has not cleaned up after the shim %d of %.12s: its bundle %s is still there", shim.pid, id, bundle)
		}
		for _, p := range alive {
			_ = kill(p.pid, unix.SIGKILL)
		}
		return len(tree), fmt.Errorf("containerd did not clean up after the shim %d of %.12s: killed %s", shim.pid, id, pidList(alive))
	}
}

// bundleOf is the task's bundle directory: the working directory containerd starts the shim in
// (STATE/io.containerd.runtime.v2.task/NAMESPACE/ID); "" when it cannot be read or is not the
// container's.
func bundleOf(procRoot string, shimPID int, id string) string {
	dir, err := os.Readlink(filepath.Join(procRoot, strconv.Itoa(shimPID), "cwd"))
	dir = strings.TrimSuffix(dir, " (deleted)")
	if err != nil || !filepath.IsAbs(dir) || filepath.Base(dir) != id {
		return ""
	}
	return dir
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// naming lists the running processes whose command line names container id: the shim's
// delete command and the runtime's delete that containerd runs after a dead shim.
func naming(procs map[int]process, id string) []process {
	var out []process
	for _, p := range procs {
		if p.state == 'Z' || p.pid == os.Getpid() {
			continue
		}
		for _, a := range p.args {
			if strings.Contains(a, id) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func pidList(procs []process) string {
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = strconv.Itoa(p.pid)
	}
	return strings.Join(pids, ", ")
}

// process is one process of the host, from /proc/PID/stat and cmdline.
type process struct {
	pid, ppid int
	state     byte
	start     uint64 // clock ticks after boot: with the PID, the process's identity
	args      []string
}

// readProcesses reads every process under procRoot; one that ends meanwhile is left out.
func readProcesses(procRoot string) map[int]process {
	entries, _ := os.ReadDir(procRoot)
	procs := make(map[int]process, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProcess(filepath.Join(procRoot, e.Name()))
		if ok {
			p.pid = pid
			procs[pid] = p
		}
	}
	return procs
}

func readProcess(dir string) (process, bool) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return process{}, false
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
	// stime cutime cstime priority nice threads itrealvalue starttime ...: comm may hold
	// spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return process{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return process{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return process{}, false
	}
	p := process{ppid: ppid, state: f[0][0], start: start}
	if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(cmdline) > 0 {
		p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return p, true
}

// shimOf finds the running containerd shim (containerd-shim-runc-v2, -runsc-v1, -kata-v2...)
// started for container id alone: its -id argument is id.
func shimOf(procs map[int]process, id string) (process, bool) {
	for _, p := range procs {
		if p.state == 'Z' || len(p.args) == 0 || !strings.HasPrefix(filepath.Base(p.args[0]), "containerd-shim") {
			continue
		}
		for i, a := range p.args {
			flagThenID := (a == "-id" || a == "--id") && i+1 < len(p.args) && p.args[i+1] == id
			if flagThenID || a == "-id="+id || a == "--id="+id {
				return p, true
			}
		}
	}
	return process{}, false
}

// descendants lists every process under pid (the shim is its processes' subreaper, so they
// stay its children however they were started).
func descendants(procs map[int]process, pid int) []process {
	children := map[int][]process{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []process
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// stillRunning lists the processes of tree that still run: the same PID and start time, and
// not a zombie (a dead process whose parent has not reaped it runs nothing).
func stillRunning(now map[int]process, tree []process) []process {
	var alive []process
	for _, p := range tree {
		if q, ok := now[p.pid]; ok && q.start == p.start && q.state != 'Z' {
			alive = append(alive, p)
		}
	}
	return alive
}
