package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker's errors for starts that the runtime or the kernel refused, verbatim as the Go client
// returned them (err.Error() of ContainerStart) on this project's test machines (Linux 6.18,
// cgroup v1 with hugetlb on the v2 hierarchy, no CAP_SYS_RESOURCE): Docker 20.10.24 with
// containerd 1.6 and runc 1.1.5, Docker 29.8.0 with containerd 2.3.5 and runc 1.5.1, Debian's
// runsc 20221219 and crun 1.8.1.
const (
	gvisorRootNetNS2010  = `Error response from daemon: OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/15748/ns/net": cannot run with network enabled in root network namespace: unknown`
	gvisorRootNetNS29    = `Error response from daemon: OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/8889/ns/net": cannot run with network enabled in root network namespace`
	crunHybrid2010       = `Error response from daemon: failed to create shim task: OCI runtime create failed: cgroups in hybrid mode not supported, drop all controllers from cgroupv2: unknown`
	crunUnknownVersion29 = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: unknown version specified`
	runcNotInPath2010    = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "nosuchcmd": executable file not found in $PATH: unknown`
	runcNotInPath29      = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "nosuchcmd": executable file not found in $PATH`
	runcExecDir2010      = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/etc": permission denied: unknown`
	runcExecDir29        = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "/etc": is a directory: permission denied`
	runcNoSuchFile2010   = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/no/such/bin": stat /no/such/bin: no such file or directory: unknown`
	runcNoSuchFile29     = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "/no/such/bin": stat /no/such/bin: no such file or directory`
	runcOOM2010          = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: can't get final child's PID from pipe: EOF: unknown`
	runcOOM29            = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: can't get final child's PID from pipe: EOF; runc init error(s): nsexec[17739]: failed to update /proc/self/oom_score_adj: Permission denied`
	runcCaps2010         = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: unable to apply caps: operation not permitted: unknown`
	runcSysctl2010       = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: open /proc/sys/net/ipv4/no_such_sysctl: no such file or directory: unknown`
	runcSysctl29         = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: open sysctl net.ipv4.no_such_sysctl file: unsafe procfs detected: openat2 fsmount:fscontext:proc/./sys/net/ipv4/no_such_sysctl: no such file or directory`
	runcMountType2010    = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting "/etc/hostname" to rootfs at "/etc": mount /etc/hostname:/etc (via /proc/self/fd/6), flags: 0x5000: not a directory: unknown: Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type`
	runcMountType29      = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting "/etc/hostname" to rootfs at "/etc": mount src=/etc/hostname, dst=/etc, dstFd=/proc/thread-self/fd/16, flags=MS_BIND|MS_REC: not a directory: Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type`
)

func TestExplainRuntimeErrorReadsTheRuntimesWords(t *testing.T) {
	controllers := func() string { return "hugetlb" }
	for _, tc := range []struct {
		name, msg string
		cause     []string // fragments of the cause
		fix       string   // a fragment of the fix; "" for none
	}{
		{"gvisor root netns, 20.10", gvisorRootNetNS2010, []string{"--network=sandbox", `"cannot run with network enabled in root network namespace"`, "gVisor issue 10704"}, `"runtimeArgs": ["--network=host"]`},
		{"gvisor root netns, 29", gvisorRootNetNS29, []string{"--network=sandbox", "root network namespace"}, `"--network=host"`},
		{"crun hybrid cgroups", crunHybrid2010, []string{"crun", `"cgroups in hybrid mode not supported, drop all controllers from cgroupv2"`, "/sys/fs/cgroup/unified: hugetlb"}, "systemd.unified_cgroup_hierarchy=1"},
		{"crun and Docker 29's spec", crunUnknownVersion29, []string{`"unknown version specified"`, "version of the OCI spec"}, "newer release"},
		{"command not in PATH, 20.10", runcNotInPath2010, []string{`command "nosuchcmd" is not in the image's $PATH`}, "command"},
		{"command not in PATH, 29", runcNotInPath29, []string{`command "nosuchcmd" is not in the image's $PATH`}, "command"},
		{"command is a directory, 20.10", runcExecDir2010, []string{`command "/etc" cannot be executed`, `"permission denied"`}, "command"},
		{"command is a directory, 29", runcExecDir29, []string{`command "/etc" cannot be executed`}, "command"},
		{"command missing, 20.10", runcNoSuchFile2010, []string{`command "/no/such/bin" does not exist in the image`}, "command"},
		{"command missing, 29", runcNoSuchFile29, []string{`command "/no/such/bin" does not exist in the image`}, "command"},
		{"oom score, 20.10", runcOOM2010, []string{`"can't get final child's PID from pipe: EOF"`, "oom_score_adj", "CAP_SYS_RESOURCE"}, ""},
		{"oom score, 29", runcOOM29, []string{"negative oom_score_adj", `"failed to update /proc/self/oom_score_adj: Permission denied"`, "CAP_SYS_RESOURCE"}, ""},
		{"capabilities", runcCaps2010, []string{`"unable to apply caps: operation not permitted"`, "bounding set"}, ""},
		{"sysctl, 20.10", runcSysctl2010, []string{"no sysctl net.ipv4.no_such_sysctl "}, "securityContext.sysctls"},
		{"sysctl, 29", runcSysctl29, []string{"no sysctl net.ipv4.no_such_sysctl "}, "securityContext.sysctls"},
		{"file onto a directory, 20.10", runcMountType2010, []string{`mount of "/etc/hostname" at "/etc"`, `"not a directory"`}, "host path"},
		{"file onto a directory, 29", runcMountType29, []string{`mount of "/etc/hostname" at "/etc"`}, "host path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := explainRuntimeError(tc.msg, controllers)
			for _, f := range tc.cause {
				if !strings.Contains(r.cause, f) {
					t.Errorf("cause %q does not say %q", r.cause, f)
				}
			}
			if tc.fix == "" && r.fix != "" || !strings.Contains(r.fix, tc.fix) {
				t.Errorf("fix %q, want one with %q", r.fix, tc.fix)
			}
			for _, noise := range []string{"Error response from daemon", "OCI runtime", "failed to create shim task", ": unknown", "\n"} {
				if strings.Contains(r.cause+r.fix, noise) {
					t.Errorf("%q repeats Docker's layers (%q)", r.cause+"; "+r.fix, noise)
				}
			}
		})
	}
}

// A refusal no rule knows is the runtime's innermost message, without the layers Docker,
// containerd and runc wrap around it.
func TestExplainRuntimeErrorStripsDockersLayers(t *testing.T) {
	const msg = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: something new: unknown`
	if got, want := explainRuntimeError(msg, func() string { return "" }).cause, "the runtime failed: something new"; got != want {
		t.Errorf("cause %q, want %q", got, want)
	}
	// crun's refusal without controllers to name.
	if got := explainRuntimeError(crunHybrid2010, func() string { return "" }).cause; strings.Contains(got, "unified:") {
		t.Errorf("cause %q names controllers it did not find", got)
	}
}

func TestCgroupV2Controllers(t *testing.T) {
	dir := t.TempDir()
	if got := cgroupV2Controllers(dir); got != "" {
		t.Errorf("no cgroup.controllers: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("hugetlb rdma\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cgroupV2Controllers(dir); got != "hugetlb rdma" {
		t.Errorf("controllers %q", got)
	}
}

// RunPodSandbox on a runtime that refuses the start answers one line with the handler, the
// runtime and its binary, the cause and the fix, and leaves no container.
func TestRunPodSandboxRefusedStartIsOneLineWithTheFix(t *testing.T) {
	fake := libdocker.NewFake()
	runsc := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake.AddRuntime("gvisor-sandbox", runsc)
	s := newTestService(t, fake, Options{})
	fake.InjectError("StartContainer", errors.New(gvisorRootNetNS2010))
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: "gvisor-sandbox"})
	wantCode(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{`start sandbox "k8s_POD_p_`, `runtime handler "gvisor-sandbox" (Docker runtime "gvisor-sandbox", ` + runsc + `)`, "root network namespace", `"runtimeArgs": ["--network=host"]`, "reload dockerd"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	for _, noise := range []string{"Error response from daemon", "OCI runtime start failed", "/proc/15748", "\n"} {
		if strings.Contains(msg, noise) {
			t.Errorf("error %q repeats Docker's text (%q)", msg, noise)
		}
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
}

// StartContainer names the default runtime when the pod has no handler.
func TestStartContainerRefusedStartNamesTheDefaultRuntime(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	fake.InjectError("StartContainer", errors.New(runcNotInPath2010))
	_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	want := fmt.Sprintf(`start container %q: runtime handler "(default)" (Docker runtime "runc", runc): the container's command "nosuchcmd" is not in the image's $PATH ("executable file not found in $PATH"); fix the container's command or the image's entrypoint`, id)
	if msg != want {
		t.Errorf("error\n %q\nwant\n %q", msg, want)
	}
}

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

func TestReclaimShimKillsTheShimAndWaitsForWhatItRan(t *testing.T) {
	f := newFakeProc(t)
	addFailedGVisorStart(f)
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
