package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeProc is a /proc of fake processes; kill stands for the kernel and for containerd's
// cleanup after a dead shim.
type fakeProc struct {
	t    *testing.T
	root string

	mu     sync.Mutex
	killed []int
	// onKill runs after the signal is recorded: it ends processes as the host would.
	onKill func(pid int)
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

// add writes process pid with its parent, state, start time and argv.
func (f *fakeProc) add(pid, ppid int, state string, start uint64, args ...string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	comm := "x"
	if len(args) > 0 {
		comm = filepath.Base(args[0])
	}
	// The comm of a real process may hold spaces and parentheses.
	stat := fmt.Sprintf("%d (%s) y) %s %d 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, comm, state, ppid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	cmdline := strings.Join(args, "\x00")
	if cmdline != "" {
		cmdline += "\x00"
	}
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) remove(pids ...int) {
	for _, pid := range pids {
		_ = os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid)))
	}
}

func (f *fakeProc) kill(pid int, sig unix.Signal) error {
	if sig != unix.SIGKILL {
		f.t.Errorf("signal %v to %d, want SIGKILL", sig, pid)
	}
	f.mu.Lock()
	f.killed = append(f.killed, pid)
	f.mu.Unlock()
	if f.onKill != nil {
		f.onKill(pid)
	}
	return nil
}

func (f *fakeProc) kills() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.killed...)
}

const (
	failedID = "ebee20d35ebc8b5e150900a06dd8aa7b2338173d595e6128de6c3b66684d41db"
	otherID  = "7d6e41aaefacf286f42d75df3289d7096eef52fc7b8b94cf6cf7a53645a85fd1"
)

// What a refused gVisor start left on Docker 20.10: the shim, runsc's gofer and sandbox, and
// the sandbox's helpers (as seen on the test machine), beside another container's shim.
func addFailedGVisorStart(f *fakeProc) {
	bundle := "/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/" + failedID
	f.add(9901, 1, "S", 5000, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", failedID, "-address", "/var/run/docker/containerd/containerd.sock")
	f.add(9928, 9901, "S", 5001, "runsc-gofer", "--root=/var/run/docker/runtime-runc/moby", "gofer", "--bundle", bundle)
	f.add(9942, 9901, "S", 5002, "runsc-sandbox", "--root=/var/run/docker/runtime-runc/moby", "boot", "--bundle="+bundle, failedID)
	f.add(9973, 9942, "S", 5003, "/proc/self/exe", "umount", "--sync-fd=3", "/proc")
	f.add(10015, 9942, "S", 5004)
	f.add(8000, 1, "S", 4000, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", otherID, "-address", "/var/run/docker/containerd/containerd.sock")
	f.add(8010, 8000, "S", 4001, "runc-init-of-another-container")
}

// withBundle gives the failed start's shim its working directory, the task's bundle, which
// containerd removes at the end of its cleanup; it returns the bundle's path.
func withBundle(t *testing.T, f *fakeProc) string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "moby", failedID)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bundle, filepath.Join(f.root, "9901", "cwd")); err != nil {
		t.Fatal(err)
	}
	return bundle
}

func TestReclaimShimKillsTheShimAndWaitsForWhatItRan(t *testing.T) {
	f := newFakeProc(t)
	addFailedGVisorStart(f)
	bundle := withBundle(t, f)
	// containerd's cleanup after the dead shim: the shim's delete command runs `runsc delete
	// --force`, which ends the sandbox and the gofer, and ends a little later itself; the killed
	// shim stays a zombie (this VM's init does not reap).
	f.onKill = func(pid int) {
		f.add(pid, 1, "Z", 5000)
		f.add(11000, 500, "S", 6000, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-address", "/var/run/docker/containerd/containerd.sock", "-publish-binary", "/usr/bin/containerd", "-id", failedID, "-bundle", "/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/"+failedID, "delete")
		f.add(11001, 11000, "S", 6001, "/usr/bin/runsc", "--root", "/var/run/docker/runtime-runc/moby", "delete", "--force", failedID)
		go func() {
			time.Sleep(50 * time.Millisecond)
			f.remove(9928, 9942, 9973, 10015)
			time.Sleep(100 * time.Millisecond)
			f.remove(11001, 11000)
			time.Sleep(100 * time.Millisecond)
			_ = os.Remove(bundle)
		}()
	}
	start := time.Now()
	n, err := reclaimShim(context.Background(), f.root, failedID, f.kill)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("ended %d processes, want 5 (the shim and the 4 under it)", n)
	}
	if got := f.kills(); len(got) != 1 || got[0] != 9901 {
		t.Errorf("killed %v, want only the shim 9901", got)
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Error("returned before the runtime's processes and containerd's cleanup were gone")
	}
	if _, err := os.Stat(bundle); err == nil {
		t.Error("returned before containerd's cleanup removed the task's bundle")
	}
	if _, err := os.Stat(filepath.Join(f.root, "8010")); err != nil {
		t.Error("another container's process is gone")
	}
}

// No shim of the container alone (none at all, a zombie one, or the one Docker 29 shares among
// a pod's containers, whose -id is the sandbox's): nothing is killed.
func TestReclaimShimLeavesOtherShimsAlone(t *testing.T) {
	f := newFakeProc(t)
	f.add(8000, 1, "S", 4000, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", otherID, "-address", "/run/containerd/containerd.sock")
	f.add(8100, 1, "Z", 4100, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", failedID)
	f.add(8200, 1, "S", 4200, "/usr/bin/not-a-shim", "-id", failedID)
	f.add(8300, 1, "S", 4300, "/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", failedID[:12])
	n, err := reclaimShim(context.Background(), f.root, failedID, f.kill)
	if err != nil || n != 0 {
		t.Errorf("reclaim = %d, %v; want nothing done", n, err)
	}
	if got := f.kills(); len(got) != 0 {
		t.Errorf("killed %v", got)
	}
}

// A cleanup of containerd's that never ends is reported, and not killed: it is containerd's.
func TestReclaimShimReportsAStuckCleanup(t *testing.T) {
	f := newFakeProc(t)
	addFailedGVisorStart(f)
	f.onKill = func(int) {
		f.remove(9901, 9928, 9942, 9973, 10015)
		f.add(11001, 11000, "D", 6001, "/usr/bin/runsc", "--root", "/var/run/docker/runtime-runc/moby", "delete", "--force", failedID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := reclaimShim(ctx, f.root, failedID, f.kill)
	if err == nil || !strings.Contains(err.Error(), "still runs (11001)") {
		t.Errorf("err = %v, want the stuck cleanup named", err)
	}
	if got := f.kills(); len(got) != 1 {
		t.Errorf("killed %v, want only the shim", got)
	}
}

// Until containerd has noticed the dead shim, none of its cleanup runs: the shim's tree is gone
// and nothing names the container, but the task's bundle is still there. That is no end: the
// cleanup's own runtime processes come later (a busy machine's containerd is slow to notice).
func TestReclaimShimWaitsForContainerdToRemoveTheBundle(t *testing.T) {
	f := newFakeProc(t)
	addFailedGVisorStart(f)
	bundle := withBundle(t, f)
	f.onKill = func(int) { f.remove(9901, 9928, 9942, 9973, 10015) }
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := reclaimShim(ctx, f.root, failedID, f.kill)
	if err == nil || !strings.Contains(err.Error(), "its bundle "+bundle+" is still there") {
		t.Errorf("err = %v, want the bundle containerd has not removed named", err)
	}
}

// When containerd does not clean up (it is down, or the shim was not its), what the shim ran is
// killed directly once the wait is over, and the error says so; a PID taken again by a new
// process (another start time) is not the old process.
func TestReclaimShimKillsWhatContainerdLeaves(t *testing.T) {
	f := newFakeProc(t)
	addFailedGVisorStart(f)
	f.onKill = func(pid int) {
		if pid == 9901 {
			f.remove(9901)
			f.add(9973, 1, "S", 9999, "a-new-process-with-an-old-pid")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := reclaimShim(ctx, f.root, failedID, f.kill)
	if err == nil || !strings.Contains(err.Error(), "containerd did not clean up") {
		t.Fatalf("err = %v, want containerd's missing cleanup reported", err)
	}
	got := map[int]bool{}
	for _, pid := range f.kills() {
		got[pid] = true
	}
	for _, pid := range []int{9901, 9928, 9942, 10015} {
		if !got[pid] {
			t.Errorf("process %d not killed (killed %v)", pid, f.kills())
		}
	}
	if got[9973] || got[8000] || got[8010] {
		t.Errorf("killed a process that is not the failed container's: %v", f.kills())
	}
}

// readProcesses parses what the kernel writes, comm with spaces and parentheses included.
func TestReadProcessesParsesStat(t *testing.T) {
	f := newFakeProc(t)
	f.add(42, 7, "S", 123456, "/usr/bin/containerd-shim-runc-v2", "-id", failedID)
	f.add(43, 42, "Z", 123457)
	if err := os.MkdirAll(filepath.Join(f.root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	procs := readProcesses(f.root)
	if len(procs) != 2 {
		t.Fatalf("read %d processes, want 2: %+v", len(procs), procs)
	}
	p := procs[42]
	if p.pid != 42 || p.ppid != 7 || p.state != 'S' || p.start != 123456 || len(p.args) != 3 || p.args[2] != failedID {
		t.Errorf("process 42 read as %+v", p)
	}
	if z := procs[43]; z.state != 'Z' || z.args != nil {
		t.Errorf("process 43 read as %+v", z)
	}
}

// The real /proc: this test's own process is found with its parent.
func TestReadProcessesReadsTheHost(t *testing.T) {
	me, ok := readProcesses("/proc")[os.Getpid()]
	if !ok || me.ppid != os.Getppid() || me.start == 0 || len(me.args) == 0 {
		t.Errorf("own process read as %+v (%v)", me, ok)
	}
}

// The shim of a container is the live containerd-shim process whose -id (or --id, or -id=,
// --id=) argument names the container alone.
func TestShimOfMatchesEveryFormOfTheIDFlag(t *testing.T) {
	const id = "4f1c0a5e9d2b"
	shim := "/usr/bin/containerd-shim-runc-v2"
	for _, tc := range []struct {
		p    process
		want bool
	}{
		{process{state: 'S', args: []string{shim, "-namespace", "moby", "-id", id}}, true},
		{process{state: 'S', args: []string{shim, "--id", id, "-address", "/run/containerd.sock"}}, true},
		{process{state: 'S', args: []string{shim, "-id=" + id}}, true},
		{process{state: 'S', args: []string{shim, "--id=" + id}}, true},
		{process{state: 'S', args: []string{shim, "-namespace", id, "-id"}}, false}, // -id last, no value
		{process{state: 'S', args: []string{id, "-id", id}}, false},                 // not a shim
		{process{state: 'Z', args: []string{shim, "-id", id}}, false},               // a zombie
		{process{state: 'S', args: []string{shim, "-id", id + "0"}}, false},
		{process{state: 'S', args: []string{shim, "-id", "other", "-bundle", id}}, false},
	} {
		tc.p.pid = 10
		_, got := shimOf(map[int]process{10: tc.p}, id)
		if got != tc.want {
			t.Errorf("shimOf(%v) = %v, want %v", tc.p.args, got, tc.want)
		}
	}
}
