//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// What the test asserts once dockerd answers again; the target is 1 s. The figures
// are logged, and the bounds are generous because these 2-core VMs are shared and noisy (a load
// spike can make a Docker 29 take seconds to start, and its first RunPodSandbox): they catch a call
// that is refused on a backoff or a cached failure, or hangs, not a slow second.
const (
	// restartRecoveryBound: cri-dockerd refuses no call (and its events and logs are back)
	// later than this after dockerd answers.
	restartRecoveryBound = 5 * time.Second
	// restartCallBound: each call has succeeded by then, its own work included.
	restartCallBound = 15 * time.Second
)

// TestDockerdRestartWithAndWithoutLiveRestore restarts a private dockerd under a running pod,
// with and without live-restore, and checks that cri-dockerd recovers without a restart of
// its own:
//
//   - calls made while dockerd is down (ContainerStatus, ListContainers, PodSandboxStatus,
//     ListPodSandbox, ContainerStats, ExecSync, a new RunPodSandbox) answer Unavailable, and
//     each succeeds soon after dockerd answers again (the time is logged; without live-restore
//     the container is dead, so ExecSync's answer is FailedPrecondition); with live-restore,
//     ContainerStatus of a container that exited during the outage too, once its log holds
//     every line Docker has;
//   - one GetContainerEvents stream stays open: without live-restore the pod's containers are
//     reported stopped; the new pod's events come, and so does the exit of a container killed
//     behind our back after the restart;
//   - a container writing a numbered line every 10 ms: its CRI log holds every number it wrote
//     (it also appends them to a file on the host) exactly once, in order: with live-restore it
//     ran through the outage and its log has no gap; without, it was killed by dockerd's
//     shutdown and its log has everything up to its death; the log of the container that
//     exited during the outage is Docker's, whole; a container started after the restart
//     logs normally;
//   - ContainerStats figures move on after the restart (the CPU counter grows, timestamps are
//     new);
//   - the private dockerd's cleanup leaves no process, container cgroup, mount, shim socket,
//     bridge or directory.
func TestDockerdRestartWithAndWithoutLiveRestore(t *testing.T) {
	for _, liveRestore := range []bool{true, false} {
		name := "live-restore"
		if !liveRestore {
			name = "no-live-restore"
		}
		t.Run(name, func(t *testing.T) { testDockerdRestart(t, liveRestore) })
	}
}

// numberedScript writes n=1, n=2, ... to stdout every 10 ms, and each number after it to
// /out/written (a host directory): the file is what the container really wrote, to compare its
// log with. It stops after `limit` lines (0: no limit) or once /out/stop exists; SIGTERM ends
// it between two commands.
func numberedScript(limit int) string {
	cond := "[ ! -e /out/stop ]"
	if limit > 0 {
		cond += fmt.Sprintf(" && [ $i -lt %d ]", limit)
	}
	return `trap "exit 0" TERM; i=0; while ` + cond + `; do i=$((i+1)); echo n=$i; echo $i >>/out/written; sleep 0.01; done`
}

// numbered is a container running numberedScript with /out on a host directory of its own.
type numbered struct {
	cfg     *runtimeapi.ContainerConfig
	written string // the numbers it wrote, one a line
	stop    string // creating it ends the container
}

func numberedContainer(t *testing.T, name string, limit int) numbered {
	out := t.TempDir()
	cfg := containerConfig(name, numberedScript(limit))
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/out", HostPath: out}}
	return numbered{cfg: cfg, written: filepath.Join(out, "written"), stop: filepath.Join(out, "stop")}
}

func testDockerdRestart(t *testing.T, liveRestore bool) {
	start := time.Now()
	leaks := &leakCheck{}
	t.Cleanup(func() { leaks.check(t) }) // first registered: runs after the private dockerd's cleanup
	// On the Docker 29 run, the private engine is a Docker 29 too.
	opts := PrivateDockerdOptions{LiveRestore: liveRestore, Docker29: sharedEngineMajor(t) >= 29}
	pd := StartPrivateDockerdWith(t, opts, busyboxImage, pauseImage)
	leaks.pd = pd
	if v, err := pd.Client.ServerVersion(t.Context()); err == nil {
		t.Logf("private dockerd: Docker %s, API %s, live-restore %v", v.Version, v.APIVersion, liveRestore)
	}
	d := StartDaemon(t, "--docker-endpoint", pd.Host)
	events := recordEvents(t, openContainerEvents(t, d))

	// Pod A, before the restart: a numbered logger and an idle container.
	podA := hostNetworkPod(newPodConfig(t, "dkrestart"))
	sA := runPod(t, d, podA, "")
	counterN := numberedContainer(t, "counter", 0)
	counterWritten := counterN.written
	counter := createContainer(t, d, sA, podA, counterN.cfg)
	startContainer(t, d, counter)
	idle := createContainer(t, d, sA, podA, containerConfig("idle", sleeper))
	startContainer(t, d, idle)
	leaks.record(t, sA, counter, idle)
	podAContainers := 2
	// With live-restore, a second logger that exits while dockerd is down.
	var quitter string
	var quitterN numbered
	if liveRestore {
		quitterN = numberedContainer(t, "quitter", 0)
		quitter = createContainer(t, d, sA, podA, quitterN.cfg)
		startContainer(t, d, quitter)
		leaks.record(t, quitter)
		podAContainers++
	}
	counterLog := filepath.Join(podA.LogDirectory, "counter.log")
	waitFor(t, "the counter's first lines", func() bool { return lineCount(counterLog) > 50 })
	events.wait(t, "pod A's containers started", func(evs []recordedEvent) bool {
		return hasEvent(evs, counter, evStarted) && hasEvent(evs, idle, evStarted)
	})
	cpu0 := statsOf(t, d, counter)
	if cpu0.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Fatalf("ContainerStats of the running counter before the restart: no CPU figure: %v", cpu0)
	}

	// The restart, with callers polling from when dockerd is down until each succeeds.
	reconnects := strings.Count(d.readLog(), "following Docker's events again")
	// What the quitter wrote up to 100 ms before dockerd's stop: Docker has read it by then.
	quitterBefore := lineCount(quitterN.written)
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	pd.Stop()
	down := time.Now()
	writtenAtDown := lineCount(counterWritten)
	podB := hostNetworkPod(newPodConfig(t, "dkrestart-new"))
	var sB string
	calls := []restartCall{
		{name: "ContainerStatus", call: func(ctx context.Context) error {
			_, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: counter})
			return err
		}},
		{name: "ListContainers", call: func(ctx context.Context) error {
			resp, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sA}})
			if err == nil && len(resp.Containers) != podAContainers {
				return fmt.Errorf("ListContainers of pod A: %d containers, want %d", len(resp.Containers), podAContainers)
			}
			return err
		}},
		{name: "PodSandboxStatus", call: func(ctx context.Context) error {
			_, err := d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sA})
			return err
		}},
		{name: "ListPodSandbox", call: func(ctx context.Context) error {
			resp, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sA}})
			if err == nil && len(resp.Items) != 1 {
				return fmt.Errorf("ListPodSandbox of pod A: %d sandboxes, want 1", len(resp.Items))
			}
			return err
		}},
		{name: "ContainerStats", call: func(ctx context.Context) error {
			resp, err := d.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: counter})
			// The container store answers from memory until it sees Docker's event stream break,
			// which comes with dockerd's exit: a call begun within 100 ms of it may still get
			// the sample of before.
			if err == nil && liveRestore && resp.Stats.GetCpu().GetTimestamp() < down.UnixNano() && time.Since(down) > 100*time.Millisecond {
				// The sample of before the restart was returned already: it must not come again.
				return fmt.Errorf("ContainerStats: a sample taken at %v, before dockerd's restart", time.Unix(0, resp.Stats.GetCpu().GetTimestamp()))
			}
			return err
		}},
		{name: "ExecSync", call: func(ctx context.Context) error {
			resp, err := d.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: counter, Cmd: []string{"echo", "ok"}, Timeout: 10})
			if err == nil && (resp.ExitCode != 0 || string(resp.Stdout) != "ok\n") {
				return fmt.Errorf("ExecSync: exit %d, stdout %q, want 0 and ok", resp.ExitCode, resp.Stdout)
			}
			return err
		}, want: func() codes.Code {
			if liveRestore {
				return codes.OK
			}
			return codes.FailedPrecondition // dockerd's shutdown killed it
		}()},
		{name: "RunPodSandbox", call: func(ctx context.Context) error {
			resp, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podB})
			if err == nil {
				sB = resp.PodSandboxId
			}
			return err
		}},
	}
	if liveRestore {
		calls = append(calls, restartCall{name: "ContainerStatus of a container that exited while dockerd was down", call: func(ctx context.Context) error {
			resp, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: quitter})
			if err == nil && resp.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				return fmt.Errorf("ContainerStatus of the quitter: %v, want exited", resp.Status.State)
			}
			if err == nil {
				// Drained: once the status says exited, its log has every line Docker has.
				if got, want := lineCount(resp.Status.LogPath), dockerLogLines(pd, quitter); got < want {
					return fmt.Errorf("ContainerStatus of the quitter says exited with %d lines in its log, Docker's has %d", got, want)
				}
			}
			return err
		}})
	}
	pollCtx, stopPolling := context.WithCancel(t.Context())
	defer stopPolling()
	results := make([]*pollResult, len(calls))
	var polling sync.WaitGroup
	for i, c := range calls {
		results[i] = &pollResult{}
		polling.Add(1)
		go func() { defer polling.Done(); results[i].poll(pollCtx, c) }()
	}
	if liveRestore {
		if err := os.WriteFile(quitterN.stop, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The outage: every call keeps answering Unavailable. Long enough for a reconnect backoff
	// to grow past a second (a real restart of dockerd takes seconds).
	time.Sleep(2 * time.Second)
	if liveRestore && !leaks.exited(quitter) {
		t.Fatal("the quitter did not exit while dockerd was down")
	}
	pd.Start()
	up := time.Now()
	writtenAtUp := lineCount(counterWritten)
	// The log follower catches up: with live-restore, the lines written up to now (some during
	// the outage); without, every line the container wrote before it died.
	caughtUp := make(chan time.Duration, 1)
	go func() {
		if testutil.PollUntil(30*time.Second, 5*time.Millisecond, func() bool { return lineCount(counterLog) >= writtenAtUp }) {
			caughtUp <- time.Since(up)
			return
		}
		caughtUp <- -1
	}()
	t.Logf("dockerd stopped in %v, was down %v (SIGTERM to answering again %v)",
		down.Sub(t0).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond), up.Sub(t0).Round(time.Millisecond))
	eventsBack := make(chan time.Duration, 1)
	go func() {
		if testutil.PollUntil(30*time.Second, 10*time.Millisecond, func() bool {
			return strings.Count(d.readLog(), "following Docker's events again") > reconnects
		}) {
			eventsBack <- time.Since(up)
			return
		}
		eventsBack <- -1
	}()
	timer := time.AfterFunc(time.Minute, stopPolling)
	polling.Wait()
	timer.Stop()
	var figures []string
	for i, c := range calls {
		r := results[i]
		if len(r.bad) > 0 {
			t.Errorf("%s: while dockerd was down or coming back, answers neither Unavailable nor %v: %v", c.name, c.want, r.bad)
		}
		if r.unavailable == 0 {
			t.Errorf("%s: never answered Unavailable while dockerd was down (%d calls)", c.name, r.attempts)
		}
		if r.done.IsZero() {
			t.Errorf("%s: no answer %v within a minute of dockerd answering again; last: %v", c.name, c.want, r.last)
			continue
		}
		after := r.done.Sub(up)
		figures = append(figures, fmt.Sprintf("%s %v", c.name, after.Round(time.Millisecond)))
		t.Logf("%s: %d calls answered Unavailable, the last %v after dockerd answered; then %v %v after it (a call of %v, begun %v after it)",
			c.name, r.unavailable, r.refused.Sub(up).Round(time.Millisecond), codeName(c.want), after.Round(time.Millisecond),
			r.done.Sub(r.began).Round(time.Millisecond), r.began.Sub(up).Round(time.Millisecond))
		if refused := r.refused.Sub(up); refused > restartRecoveryBound {
			t.Errorf("%s still answered Unavailable %v after dockerd answered again, want at most %v (target 1 s)", c.name, refused, restartRecoveryBound)
		}
		if after > restartCallBound {
			t.Errorf("%s answered %v only %v after dockerd answered again, want within %v (target 1 s)", c.name, c.want, after, restartCallBound)
		}
	}
	t.Logf("recovery after dockerd answered: %s", strings.Join(figures, ", "))
	if took := <-caughtUp; took < 0 {
		t.Errorf("logs: the counter's CRI log has %d lines 30 s after dockerd answered, want the %d it had written by then", lineCount(counterLog), writtenAtUp)
	} else {
		t.Logf("logs: the counter's CRI log had the %d lines written by then %v after dockerd answered", writtenAtUp, took.Round(time.Millisecond))
		if took > restartRecoveryBound {
			t.Errorf("logs: the counter's CRI log caught up only %v after dockerd answered, want within %v", took, restartRecoveryBound)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if sB == "" {
		t.Fatal("RunPodSandbox after the restart gave no sandbox")
	}

	// Events: the watcher follows Docker again, and events flow.
	reconnected := <-eventsBack
	if reconnected < 0 {
		t.Fatal("cri-dockerd did not follow Docker's events again within 30 s of dockerd answering")
	}
	t.Logf("events: following Docker's events again %v after dockerd answered", reconnected.Round(time.Millisecond))
	if reconnected > restartRecoveryBound {
		t.Errorf("cri-dockerd followed Docker's events again only %v after dockerd answered, want within %v", reconnected, restartRecoveryBound)
	}
	if liveRestore {
		if evs := events.since(t0); hasEvent(evs, counter, evStopped) || hasEvent(evs, idle, evStopped) || hasEvent(evs, sA, evStopped) {
			t.Errorf("with live-restore pod A kept running, yet events since the restart report it stopped: %v", eventSummary(evs))
		}
	} else {
		evs := events.wait(t, "pod A reported stopped", func(evs []recordedEvent) bool {
			return hasEvent(evs, counter, evStopped) && hasEvent(evs, idle, evStopped) && hasEvent(evs, sA, evStopped)
		})
		for _, e := range evs {
			if e.ev.ContainerId == counter && e.ev.ContainerEventType == evStopped {
				if st := statusOf(e.ev, counter); st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
					t.Errorf("the counter's stopped event reports it %v, want exited", st.GetState())
				}
			}
		}
	}
	events.wait(t, "the new pod's sandbox created and started", func(evs []recordedEvent) bool {
		return hasEvent(evs, sB, evCreated) && hasEvent(evs, sB, evStarted)
	})
	if st, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sB}); err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("PodSandboxStatus of the pod run after the restart: %v %v, want ready", st, err)
	}

	// A container started after the restart, in the new pod: it logs normally, and exec works.
	afterN := numberedContainer(t, "after", 300)
	afterWritten := afterN.written
	after := createContainer(t, d, sB, podB, afterN.cfg)
	startContainer(t, d, after)
	exiter := createContainer(t, d, sB, podB, containerConfig("exiter", sleeper))
	startContainer(t, d, exiter)
	leaks.record(t, sB, after, exiter)
	if resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: after, Cmd: []string{"echo", "ok"}, Timeout: 10}); err != nil || resp.ExitCode != 0 {
		t.Errorf("ExecSync in a container started after the restart: %v %v", resp, err)
	}
	events.wait(t, "the new containers started", func(evs []recordedEvent) bool {
		return hasEvent(evs, after, evCreated) && hasEvent(evs, after, evStarted) && hasEvent(evs, exiter, evStarted)
	})

	// A container exiting after the restart, behind our back, is reported: with live-restore one
	// that lived through the restart.
	victim := exiter
	if liveRestore {
		victim = idle
	}
	killed := time.Now()
	if err := pd.Client.ContainerKill(t.Context(), victim, "KILL"); err != nil {
		t.Fatalf("docker kill %.12s: %v", victim, err)
	}
	events.wait(t, "the killed container reported stopped", func(evs []recordedEvent) bool {
		for _, e := range evs {
			if e.at.After(killed) && e.ev.ContainerId == victim && e.ev.ContainerEventType == evStopped {
				return statusOf(e.ev, victim).GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
			}
		}
		return false
	})
	t.Logf("events: docker kill after the restart reported stopped %v later", time.Since(killed).Round(time.Millisecond))

	// Stats move on after the restart.
	statsTarget := counter
	if !liveRestore {
		statsTarget = after
		if st := statsOf(t, d, counter); st.GetCpu() != nil {
			t.Errorf("ContainerStats of the container dockerd's shutdown killed has CPU figures %v, want attributes only", st.Cpu)
		}
	}
	first := statsOf(t, d, statsTarget)
	if liveRestore {
		// Stats come from the cgroups, which dockerd's outage does not stop: the sample may be
		// one the background refresh took while dockerd was down, but it is newer than the last
		// one before, and the counter has burnt CPU since.
		if got, was := first.GetCpu().GetUsageCoreNanoSeconds().GetValue(), cpu0.GetCpu().GetUsageCoreNanoSeconds().GetValue(); got <= was || first.GetCpu().GetTimestamp() <= cpu0.GetCpu().GetTimestamp() {
			t.Errorf("ContainerStats after the restart: CPU %d ns at %v, before the restart %d at %v: want a newer sample and more CPU", got, time.Unix(0, first.GetCpu().GetTimestamp()), was, time.Unix(0, cpu0.GetCpu().GetTimestamp()))
		}
	}
	time.Sleep(1100 * time.Millisecond) // statsMaxAge: a caller asking again gets a new sample
	second := statsOf(t, d, statsTarget)
	c1, c2 := first.GetCpu().GetUsageCoreNanoSeconds().GetValue(), second.GetCpu().GetUsageCoreNanoSeconds().GetValue()
	if second.GetCpu().GetTimestamp() <= first.GetCpu().GetTimestamp() || c2 <= c1 {
		t.Errorf("ContainerStats 1.1 s apart after the restart: CPU %d then %d ns, timestamps %d then %d: want both to grow", c1, c2, first.GetCpu().GetTimestamp(), second.GetCpu().GetTimestamp())
	}
	t.Logf("stats: CPU %d ns before the restart, %d and %d ns after (%s)", cpu0.GetCpu().GetUsageCoreNanoSeconds().GetValue(), c1, c2, map[bool]string{true: "the counter", false: "the container started after"}[liveRestore])

	// Logs.
	if liveRestore {
		waitFor(t, "the counter's lines after the restart", func() bool { return lineCount(counterWritten) > writtenAtUp+100 })
		if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: counter, Timeout: 10}); err != nil {
			t.Fatal(err)
		}
	}
	waitExited(t, d, counter)
	lines, ok := checkNumberedLog(t, "the counter", counterLog, counterWritten)
	if liveRestore {
		t.Logf("logs: the counter wrote %d lines, %d of them while dockerd was down (%d to %d): %s", lines, writtenAtUp-writtenAtDown, writtenAtDown+1, writtenAtUp, verdict(ok))
		if writtenAtUp <= writtenAtDown {
			t.Errorf("with live-restore the counter wrote nothing while dockerd was down (%d lines before, %d after)", writtenAtDown, writtenAtUp)
		}
	} else {
		t.Logf("logs: the counter wrote %d lines before dockerd's shutdown killed it: %s", lines, verdict(ok))
	}
	if liveRestore {
		// What it wrote after dockerd's shutdown began is not in Docker's own log either:
		// dockerd no longer reads the container's output FIFO, which is gone with the
		// container's exit before the new dockerd opens it. Our log must be Docker's, whole.
		docker := dockerLogLines(pd, quitter)
		n, ok := checkNumberedLines(t, "the quitter", filepath.Join(podA.LogDirectory, "quitter.log"), quitterN.written, docker)
		t.Logf("logs: the quitter, which exited while dockerd was down, wrote %d lines, %d of them before dockerd's stop; Docker's log has %d (it lost %d), ours %d: %s",
			lineCount(quitterN.written), quitterBefore, docker, lineCount(quitterN.written)-docker, n, verdict(ok))
		if docker < quitterBefore {
			t.Errorf("Docker's log of the quitter has %d lines, fewer than it wrote before dockerd's stop (%d)", docker, quitterBefore)
		}
	}
	waitExited(t, d, after)
	if n, ok := checkNumberedLog(t, "the container started after the restart", filepath.Join(podB.LogDirectory, "after.log"), afterWritten); n != 300 {
		t.Errorf("the container started after the restart logged %d lines, want 300", n)
	} else {
		t.Logf("logs: the container started after the restart wrote %d lines: %s", n, verdict(ok))
	}

	if events.ended() != nil {
		t.Errorf("the event stream ended: %v", events.ended())
	}
	t.Logf("whole subtest %v", time.Since(start).Round(time.Millisecond))
}

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
)

// sharedEngineMajor is the major version of the engine the suite runs on (DOCKER_HOST).
func sharedEngineMajor(t *testing.T) int {
	t.Helper()
	v, err := suite.docker.ServerVersion(t.Context())
	if err != nil {
		t.Fatalf("docker version: %v", err)
	}
	major, _ := strconv.Atoi(strings.SplitN(v.Version, ".", 2)[0])
	return major
}

// restartCall is one call polled across the restart.
type restartCall struct {
	name string
	call func(ctx context.Context) error
	// want is the answer it must give once dockerd is back (OK unless said).
	want codes.Code
}

// pollResult is what a call answered, from dockerd down until its wanted answer.
type pollResult struct {
	attempts, unavailable int
	bad                   []string // answers neither Unavailable nor the wanted one
	last                  error
	refused               time.Time // when the last Unavailable came
	began, done           time.Time // the call that gave the wanted answer
}

// poll calls c every 10 ms until it gives its wanted answer or ctx ends.
func (r *pollResult) poll(ctx context.Context, c restartCall) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		began := time.Now()
		err := c.call(callCtx)
		cancel()
		r.attempts++
		r.last = err
		switch code := status.Code(err); {
		case ctx.Err() != nil:
			return
		case code == c.want:
			r.began, r.done = began, time.Now()
			return
		case code == codes.Unavailable:
			r.unavailable++
			r.refused = time.Now()
		default:
			if len(r.bad) < 5 {
				r.bad = append(r.bad, err.Error())
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func codeName(c codes.Code) string {
	if c == codes.OK {
		return "success"
	}
	return c.String()
}

// statsOf is ContainerStats, failing the test on error.
func statsOf(t *testing.T, d *Daemon, id string) *runtimeapi.ContainerStats {
	t.Helper()
	resp, err := d.Runtime.ContainerStats(t.Context(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStats %.12s: %v", id, err)
	}
	return resp.Stats
}

// dockerLogLines is how many lines Docker's own log of a container has (-1 if unreadable).
func dockerLogLines(pd *PrivateDockerd, id string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := pd.Client.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return -1
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		return -1
	}
	return bytes.Count(out.Bytes(), []byte("\n"))
}

// lineCount is the number of lines in a file (0 when missing).
func lineCount(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte("\n"))
}

// checkNumberedLog checks the CRI log of a numberedScript container against the numbers it
// wrote to its file: the log holds n=1 to n=last exactly once each, in order, with
// non-decreasing timestamps, where last is the file's last number (or one more: a kill can fall
// between the echo to stdout and the append to the file). It returns how many lines the log
// has, and whether they passed.
func checkNumberedLog(t *testing.T, what, logPath, writtenPath string) (int, bool) {
	t.Helper()
	return checkNumberedLines(t, what, logPath, writtenPath, -1)
}

// checkNumberedLines is checkNumberedLog with the number of lines the log must have when
// want >= 0 (Docker's own count, when Docker itself lost some).
func checkNumberedLines(t *testing.T, what, logPath, writtenPath string, want int) (int, bool) {
	t.Helper()
	ok := true
	errorf := func(format string, args ...any) {
		t.Helper()
		ok = false
		t.Errorf(format, args...)
	}
	writtenData, err := os.ReadFile(writtenPath)
	if err != nil {
		t.Fatal(err)
	}
	written := strings.Fields(string(writtenData))
	for i, w := range written {
		if w != strconv.Itoa(i+1) {
			t.Fatalf("%s: its own file %s has %q at line %d", what, writtenPath, w, i+1)
		}
	}
	lines := readCRILog(t, logPath)
	var prev time.Time
	for i, l := range lines {
		if l.stream != "stdout" || l.tag != "F" || l.content != "n="+strconv.Itoa(i+1) {
			errorf("%s: log line %d is %+v, want stdout F n=%d (a line lost, repeated or out of order)", what, i+1, l, i+1)
			break
		}
		if l.at.Before(prev) {
			errorf("%s: log line %d stamped %v, before the line above it (%v)", what, i+1, l.at, prev)
		}
		prev = l.at
	}
	switch n := len(lines); {
	case want >= 0 && n != want:
		errorf("%s: log has %d lines, Docker's %d", what, n, want)
	case want < 0 && n != len(written) && n != len(written)+1:
		errorf("%s: log has %d lines, the container wrote %d", what, n, len(written))
	}
	return len(lines), ok
}

func verdict(ok bool) string {
	if ok {
		return "each once, in order"
	}
	return "NOT each once in order (see above)"
}

// recordedEvent is one container event and when it came.
type recordedEvent struct {
	at time.Time
	ev *runtimeapi.ContainerEventResponse
}

// eventRecorder keeps every event of one stream, for checks over the whole test.
type eventRecorder struct {
	mu     sync.Mutex
	evs    []recordedEvent
	err    error
	closed bool
}

func recordEvents(t *testing.T, es *eventsStream) *eventRecorder {
	r := &eventRecorder{}
	go func() {
		for ev := range es.ch {
			r.mu.Lock()
			r.evs = append(r.evs, recordedEvent{time.Now(), ev})
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.err, r.closed = es.err, true
		r.mu.Unlock()
	}()
	return r
}

func (r *eventRecorder) since(at time.Time) []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recordedEvent
	for _, e := range r.evs {
		if !e.at.Before(at) {
			out = append(out, e)
		}
	}
	return out
}

func (r *eventRecorder) ended() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("stream closed: %v", r.err)
	}
	return nil
}

// wait waits (30 s at most) until cond holds for the events so far, and returns them.
func (r *eventRecorder) wait(t *testing.T, what string, cond func([]recordedEvent) bool) []recordedEvent {
	t.Helper()
	var evs []recordedEvent
	if !testutil.PollUntil(30*time.Second, 10*time.Millisecond, func() bool {
		evs = r.since(time.Time{})
		if cond(evs) {
			return true
		}
		if err := r.ended(); err != nil {
			t.Fatalf("events: %s: %v; got %s", what, err, eventSummary(evs))
		}
		return false
	}) {
		t.Fatalf("events: %s: not within 30 s; got %s", what, eventSummary(evs))
	}
	return evs
}

func hasEvent(evs []recordedEvent, id string, typ runtimeapi.ContainerEventType) bool {
	for _, e := range evs {
		if e.ev.ContainerId == id && e.ev.ContainerEventType == typ {
			return true
		}
	}
	return false
}

func statusOf(ev *runtimeapi.ContainerEventResponse, id string) *runtimeapi.ContainerStatus {
	for _, st := range ev.ContainersStatuses {
		if st.Id == id {
			return st
		}
	}
	return nil
}

func eventSummary(evs []recordedEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%s %v %.12s] ", e.at.Format("15:04:05.000"), e.ev.ContainerEventType, e.ev.ContainerId)
	}
	return b.String()
}

// leakCheck checks, after the private dockerd's cleanup, that nothing of it or of its
// containers is left: no process under its directory, none of the containers' processes
// (by pid and start time), cgroups or shim sockets, no mount, no bridge, no directory.
type leakCheck struct {
	pd         *PrivateDockerd
	containers []leakContainer
}

type leakContainer struct {
	id        string
	pid       int
	startTime string
	cgroups   []string
	shimSock  string
}

// record notes the processes, cgroups and shim sockets of running containers.
func (l *leakCheck) record(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		c, err := l.pd.Client.ContainerInspect(t.Context(), id)
		if err != nil || c.State == nil || c.State.Pid == 0 {
			t.Fatalf("docker inspect %.12s: %v (want a running container)", id, err)
		}
		lc := leakContainer{id: c.ID, pid: c.State.Pid, startTime: procStartTime(c.State.Pid)}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.State.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 || f[2] == "/" || !strings.Contains(f[2], c.ID) {
				continue
			}
			ctrl := strings.TrimPrefix(f[1], "name=")
			if ctrl == "" {
				ctrl = "unified"
			}
			lc.cgroups = append(lc.cgroups, filepath.Join("/sys/fs/cgroup", ctrl, f[2]))
		}
		// containerd 1.6's shim socket: /run/containerd/s/sha256(address/namespace/id).
		addr := filepath.Join(l.pd.Dir, "x", "containerd", "containerd.sock")
		lc.shimSock = fmt.Sprintf("/run/containerd/s/%x", sha256.Sum256([]byte(filepath.Join(addr, privateContainerdNamespace, c.ID))))
		l.containers = append(l.containers, lc)
	}
}

// exited reports whether the process of a recorded container is gone.
func (l *leakCheck) exited(id string) bool {
	for _, c := range l.containers {
		if c.id == id {
			return procStartTime(c.pid) != c.startTime
		}
	}
	return false
}

func (l *leakCheck) check(t *testing.T) {
	if l.pd == nil {
		return
	}
	dir := l.pd.Dir
	if pids := processesUnder(dir); len(pids) > 0 {
		t.Errorf("leak: processes %v still run from %s", pids, dir)
	}
	for _, c := range l.containers {
		if st := procStartTime(c.pid); st != "" && st == c.startTime {
			t.Errorf("leak: process %d of container %.12s still runs", c.pid, c.id)
		}
		for _, cg := range c.cgroups {
			if _, err := os.Stat(cg); err == nil {
				t.Errorf("leak: cgroup %s of container %.12s is still there", cg, c.id)
			}
		}
		if _, err := os.Lstat(c.shimSock); err == nil {
			t.Errorf("leak: shim socket %s of container %.12s is still there", c.shimSock, c.id)
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(mi, []byte(" "+dir+"/")) {
		t.Errorf("leak: mounts under %s are still there", dir)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("leak: %s is still there", dir)
	}
	if err := exec.Command("ip", "link", "show", l.pd.bridge).Run(); err == nil {
		t.Errorf("leak: bridge %s is still there", l.pd.bridge)
	}
	if !t.Failed() {
		t.Logf("cleanup left nothing: no process, mount, directory or bridge of the private dockerd; none of the processes, cgroups (%d) or shim sockets of its %d containers", countCgroups(l.containers), len(l.containers))
	}
}

func countCgroups(cs []leakContainer) int {
	n := 0
	for _, c := range cs {
		n += len(c.cgroups)
	}
	return n
}

// procStartTime is field 22 of /proc/PID/stat (start time in clock ticks), "" when no such
// process: with the pid it names one process, whatever pids were reused since.
func procStartTime(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
