//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// A start that the runtime refuses leaves nothing behind: no Docker container, and no process
// of the runtime. The runtime "gvisor-sandbox" (hack/docker.sh: Debian's runsc 20221219 with
// gVisor's default --network=sandbox) refuses every start on this machine's kernel, after
// `runsc create` started its sandbox and gofer. Docker alone leaves them running under their
// containerd shim for ever: Docker 20.10 deletes the task without a kill, which containerd
// refuses for a task still "created", and Docker 29's kill of it is refused by this runsc;
// docker kill and stop refuse a container that is not running. See internal/core/shim_reclaim.go.

const failingGVisorRuntime = "gvisor-sandbox"

// requireDockerRuntime fails the test when the engine lacks a runtime hack/docker.sh adds.
func requireDockerRuntime(t testing.TB, name string) {
	t.Helper()
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Runtimes[name]; !ok {
		t.Fatalf("dockerd has no runtime %q; hint: %s", name, setupHint)
	}
}

// hostProcess is one process of the host, from /proc.
type hostProcess struct {
	pid, ppid int
	state     string // R, S, Z...
	args      []string
}

func (p hostProcess) String() string {
	line := strconv.Itoa(p.pid) + " " + strings.Join(p.args, " ")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line
}

// hostProcesses reads every process of the host, zombies included.
func hostProcesses(t testing.TB) map[int]hostProcess {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	procs := map[int]hostProcess{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		cmdline, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = hostProcess{pid: pid, ppid: ppid, state: f[0], args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
	}
	return procs
}

// isRuntimeProcess tells a process of a container runtime: a containerd shim or runsc's
// processes (runsc-gofer, runsc-sandbox, runsc itself). Zombies are not running anything: this
// VM's init leaves the shims that exited as zombies, whoever ran them.
func isRuntimeProcess(p hostProcess) bool {
	if p.state == "Z" || len(p.args) == 0 {
		return false
	}
	base := filepath.Base(p.args[0])
	return strings.HasPrefix(base, "containerd-shim") || strings.HasPrefix(base, "runsc")
}

// runtimeProcessesOf lists the running runtime processes that belong to the containers ids
// (their shim runs with -id ID; runsc's processes name the bundle, which holds the ID) and
// every descendant of them.
func runtimeProcessesOf(t testing.TB, ids []string) []hostProcess {
	t.Helper()
	procs := hostProcesses(t)
	mine := map[int]bool{}
	for pid, p := range procs {
		if !isRuntimeProcess(p) {
			continue
		}
		joined := strings.Join(p.args, " ")
		for _, id := range ids {
			if strings.Contains(joined, id) {
				mine[pid] = true
			}
		}
	}
	// Descendants: what the shim or the sandbox started.
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !mine[pid] && mine[p.ppid] && p.state != "Z" {
				mine[pid], changed = true, true
			}
		}
	}
	var out []hostProcess
	for pid := range mine {
		out = append(out, procs[pid])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// runtimeProcessCount counts the running runtime processes of the whole host: every test and
// engine's, for the log only (others run containers on the same engines meanwhile).
func runtimeProcessCount(t testing.TB) int {
	n := 0
	for _, p := range hostProcesses(t) {
		if isRuntimeProcess(p) {
			n++
		}
	}
	return n
}

// dockerCreates follows the containers Docker creates with a label, from Docker's events;
// the returned function waits until n were seen (or a minute passed) and returns their IDs.
func dockerCreates(t testing.TB, label string) func(n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Since: Docker replays what happened after that second, however late the stream opens.
	msgs, errs := suite.docker.Events(ctx, events.ListOptions{Since: strconv.FormatInt(time.Now().Unix(), 10), Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("event", string(events.ActionCreate)),
		filters.Arg("label", label),
	)})
	var ids []string
	return func(n int) []string {
		t.Helper()
		timeout := time.After(testutil.Scaled(time.Minute))
		for len(ids) < n {
			select {
			case m := <-msgs:
				ids = append(ids, m.Actor.ID)
			case err := <-errs:
				t.Fatalf("docker events: %v", err)
			case <-timeout:
				t.Fatalf("saw %d creates of %s in Docker's events, want %d", len(ids), label, n)
			}
		}
		return ids
	}
}

// Ten failed RunPodSandbox calls, as the kubelet retries a pod whose runtime refuses it, leave
// no runtime process and no container, and each answers one line that names the handler, the
// runtime, the cause and the fix.
func TestFailedSandboxStartsLeaveNoRuntimeProcess(t *testing.T) {
	requireDockerRuntime(t, failingGVisorRuntime)
	d := StartDaemon(t)
	cfg := newPodConfig(t, "rt-fail")
	var label string
	for k, v := range cfg.Labels {
		label = k + "=" + v
	}
	created := dockerCreates(t, label)
	before := runtimeProcessCount(t)

	const attempts = 10
	for i := 0; i < attempts; i++ {
		_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: failingGVisorRuntime})
		if i > 0 {
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("attempt %d: %v, want FailedPrecondition", i+1, err)
			}
			continue
		}
		if err == nil {
			t.Skipf("runtime %q started a pod here (a runsc that knows this kernel's network namespaces): no refused start to clean up", failingGVisorRuntime)
		}
		t.Logf("RunPodSandbox: %v", err)
		wantCode(t, err, codes.FailedPrecondition, `runtime handler "gvisor-sandbox" (Docker runtime "gvisor-sandbox", `, "runsc", "root network namespace", `"runtimeArgs": ["--network=host"]`, "daemon.json")
		if msg := status.Convert(err).Message(); strings.Contains(msg, "\n") || strings.Contains(msg, "Error response from daemon") || strings.Contains(msg, "OCI runtime") {
			t.Errorf("error is Docker's raw text, want one line of ours: %q", msg)
		}
	}
	ids := created(attempts)
	left := runtimeProcessesOf(t, ids)
	after := runtimeProcessCount(t)
	t.Logf("runtime processes on the host: %d before, %d after %d failed starts; of the failed sandboxes: %d", before, after, attempts, len(left))
	if len(left) != 0 {
		lines := make([]string, len(left))
		for i, p := range left {
			lines[i] = p.String()
		}
		t.Errorf("%d runtime processes of the %d failed sandboxes left running:\n%s", len(left), attempts, strings.Join(lines, "\n"))
	}
	if list := podContainers(t, cfg.Metadata); len(list) != 0 {
		t.Errorf("%d Docker containers of the pod left: %v", len(list), list[0].Names)
	}
	for _, id := range ids {
		if _, err := suite.docker.ContainerInspect(t.Context(), id); err == nil {
			t.Errorf("Docker still has the failed sandbox %.12s", id)
		}
	}
}
