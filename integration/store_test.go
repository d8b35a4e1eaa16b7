//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// The container store (package store) answers the lists and status calls from memory.
// Under churn — 50 pods created and removed while their containers exit on their own, `docker
// rm -f` and `docker kill` from outside, and dockerd restarted once — what it reports must be
// exactly what Docker holds: afterwards every field we report is compared with a fresh inspect.
// An exit that Docker reports must reach ContainerStatus soon after Docker's event (the issue
// asks for 100 ms; the figures are logged, the bound asserted is a loose one for this VM).
func TestStoreAgreesWithDockerUnderChurn(t *testing.T) {
	pd := ownDockerd(t)
	d := StartDaemon(t, "--docker-endpoint", pd.Host)
	ctx := t.Context()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	var rngMu sync.Mutex
	randInt := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.Intn(n) }

	// Latency from Docker's die event to ContainerStatus reporting the exit.
	lat := watchExitLatency(t, pd, d)

	type pod struct {
		cfg      *runtimeapi.PodSandboxConfig
		id, ctr  string
		outsider string // what is done to it from outside
	}
	const pods = 50
	all := make([]*pod, pods)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, pods)
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cfg := hostNetworkPod(newPodConfig(t, fmt.Sprintf("churn%02d", i)))
			run, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				errs <- err
				return
			}
			// Some exit on their own, with a code of their own, after a while.
			script := sleeper
			if i%3 == 0 {
				script = fmt.Sprintf("sleep 0.%d; exit %d", 1+randInt(9), i%5)
			}
			c, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: containerConfig("app", script), SandboxConfig: cfg})
			if err == nil {
				_, err = d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
			}
			if err != nil {
				errs <- err
				return
			}
			p := &pod{cfg: cfg, id: run.PodSandboxId, ctr: c.ContainerId}
			switch i % 7 {
			case 1:
				p.outsider = "kill"
			case 2:
				p.outsider = "rm"
			case 4:
				p.outsider = "remove-pod" // through the CRI, while the rest goes on
			}
			all[i] = p
		}()
		if i == pods/2 {
			// Halfway: dockerd restarts (its containers die; the store relists after).
			wg.Wait()
			lat.pause(func() { pd.Restart() })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		// Pods started while dockerd restarts may fail; that is not what is tested here.
		t.Logf("a pod did not start: %v", err)
	}
	for _, p := range all {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			switch p.outsider {
			case "kill":
				_ = pd.Client.ContainerKill(cctx, p.ctr, "KILL")
			case "rm":
				_ = pd.Client.ContainerRemove(cctx, p.ctr, container.RemoveOptions{Force: true})
			case "remove-pod":
				if _, err := d.Runtime.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
					t.Errorf("StopPodSandbox: %v", err)
				}
				if _, err := d.Runtime.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
					t.Errorf("RemovePodSandbox: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	// Some containers are still on their way out (exits a moment after their start): compare
	// once the state has settled, in Docker and in ours.
	compareWithDocker(t, pd, d)
	ds := lat.stop()
	if n := len(lat.listed); n > 0 {
		ls := append([]time.Duration(nil), lat.listed...)
		sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
		t.Logf("die event -> ListContainers EXITED, %d exits: p50 %v, max %v", n, ls[n/2], ls[n-1])
	}
	if len(ds) == 0 {
		t.Fatal("no exit was observed")
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("die event -> ContainerStatus EXITED, %d exits: p50 %v, p90 %v, max %v", len(ds), ds[len(ds)/2], ds[len(ds)*9/10], ds[len(ds)-1])
	// A bound to catch a store that relists instead of following events, not a speed judgement:
	// scaled with the machine's load.
	if limit := testutil.Scaled(2 * time.Second); ds[len(ds)/2] > limit {
		t.Errorf("half of the exits took more than %v to reach ContainerStatus (%v)", limit, ds[len(ds)/2])
	}
}

// compareWithDocker checks that the CRI lists are Docker's containers of ours, and that each
// container's and sandbox's reported state is what a fresh inspect says. Containers may still
// be exiting when it is called: it compares until a round finds no difference (the state has
// settled and ours agrees), and reports the differences of the last round when none does.
func compareWithDocker(t *testing.T, pd *PrivateDockerd, d *Daemon) {
	t.Helper()
	var diffs []string
	rounds := 0
	testutil.PollUntil(30*time.Second, 200*time.Millisecond, func() bool {
		rounds++
		diffs = dockerDifferences(t, pd, d)
		return len(diffs) == 0
	})
	for _, diff := range diffs {
		t.Error(diff)
	}
	t.Logf("compared with Docker in %d round(s)", rounds)
}

// dockerDifferences is one round of compareWithDocker: what the CRI says that a fresh inspect
// does not.
func dockerDifferences(t *testing.T, pd *PrivateDockerd, d *Daemon) []string {
	t.Helper()
	ctx := t.Context()
	var diffs []string
	errorf := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	list, err := pd.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "io.kubernetes.docker.type=container"))})
	if err != nil {
		t.Fatal(err)
	}
	cri, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]*runtimeapi.Container{}
	for _, c := range cri.Containers {
		listed[c.Id] = c
	}
	if len(listed) != len(list) {
		errorf("ListContainers has %d containers, Docker %d", len(listed), len(list))
	}
	for _, c := range list {
		in, err := pd.Client.ContainerInspect(ctx, c.ID)
		if err != nil {
			errorf("inspect %.12s: %v", c.ID, err)
			continue
		}
		st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ID})
		if err != nil {
			errorf("ContainerStatus %.12s: %v", c.ID, err)
			continue
		}
		s := st.Status
		want := containerStateOf(in.State.Status)
		if s.State != want || int(s.ExitCode) != in.State.ExitCode ||
			s.StartedAt != dockerTime(in.State.StartedAt) || s.FinishedAt != dockerTime(in.State.FinishedAt) ||
			(in.State.OOMKilled && s.Reason != "OOMKilled") {
			errorf("container %.12s: status %v exit %d started %d finished %d reason %q; Docker %s exit %d started %s finished %s oom %v",
				c.ID, s.State, s.ExitCode, s.StartedAt, s.FinishedAt, s.Reason, in.State.Status, in.State.ExitCode, in.State.StartedAt, in.State.FinishedAt, in.State.OOMKilled)
		}
		if l := listed[c.ID]; l == nil || l.State != want {
			errorf("container %.12s: listed %v, Docker %s", c.ID, l.GetState(), in.State.Status)
		}
	}
	sandboxes, err := pd.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "io.kubernetes.docker.type=podsandbox"))})
	if err != nil {
		t.Fatal(err)
	}
	criPods, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*runtimeapi.PodSandbox{}
	for _, p := range criPods.Items {
		pods[p.Id] = p
	}
	for _, sb := range sandboxes {
		want := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if sb.State == "running" {
			want = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		st, err := d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.ID})
		if err != nil || st.Status.State != want || pods[sb.ID].GetState() != want {
			errorf("sandbox %.12s: status %v (%v), listed %v; Docker %s", sb.ID, st.GetStatus().GetState(), err, pods[sb.ID].GetState(), sb.State)
		}
		delete(pods, sb.ID)
	}
	for id, p := range pods {
		// Listed without a container: only a sandbox removed behind our back, NOTREADY.
		if p.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			errorf("sandbox %.12s listed %v, Docker has no such container", id, p.State)
		}
	}
	if len(diffs) == 0 {
		t.Logf("compared %d containers and %d sandboxes with Docker", len(list), len(sandboxes))
	}
	return diffs
}

func containerStateOf(docker string) runtimeapi.ContainerState {
	switch docker {
	case "created":
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case "running", "paused", "restarting":
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case "exited", "dead":
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

func dockerTime(v string) int64 {
	ts, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || ts.Year() <= 1 {
		return 0
	}
	return ts.UnixNano()
}

// exitLatency follows Docker's die events and, for each, polls ContainerStatus until it says
// EXITED, recording the delay from the event's time.
type exitLatency struct {
	mu sync.Mutex
	// paused is when dockerd restarted: exits around it are not the store's latency (dockerd
	// does not answer, and reads wait for the relist).
	pausedFrom, pausedTo time.Time
	ds                   []time.Duration
	listed               []time.Duration // die event -> ListContainers EXITED
	cancel               context.CancelFunc
	wg                   sync.WaitGroup
}

func watchExitLatency(t *testing.T, pd *PrivateDockerd, d *Daemon) *exitLatency {
	ctx, cancel := context.WithCancel(context.Background())
	l := &exitLatency{cancel: cancel}
	t.Cleanup(func() { l.stop() })
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for ctx.Err() == nil {
			msgs, errs := pd.Client.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
				filters.Arg("type", "container"), filters.Arg("event", "die"), filters.Arg("label", "io.kubernetes.docker.type=container"))})
		follow:
			for {
				select {
				case m := <-msgs:
					at := time.Unix(0, m.TimeNano)
					if !l.counted(at) {
						continue
					}
					l.wg.Add(1)
					go func(id string) {
						defer l.wg.Done()
						testutil.PollUntil(10*time.Second, time.Millisecond, func() bool {
							if ctx.Err() != nil {
								return true
							}
							lst, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
							if err == nil && len(lst.Containers) == 1 && lst.Containers[0].State == runtimeapi.ContainerState_CONTAINER_EXITED {
								l.mu.Lock()
								l.listed = append(l.listed, time.Since(at))
								l.mu.Unlock()
								return true
							}
							return false
						})
						testutil.PollUntil(10*time.Second, time.Millisecond, func() bool {
							if ctx.Err() != nil {
								return true
							}
							st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
							if err != nil {
								return true // removed, or dockerd restarting
							}
							if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
								l.mu.Lock()
								l.ds = append(l.ds, time.Since(at))
								l.mu.Unlock()
								return true
							}
							return false
						})
					}(m.Actor.ID)
				case <-errs:
					break follow // dockerd restarted: follow again
				case <-ctx.Done():
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return l
}

// pause runs f (a dockerd restart); exits from then until a second after it are not counted.
func (l *exitLatency) pause(f func()) {
	l.mu.Lock()
	l.pausedFrom, l.pausedTo = time.Now(), time.Now().Add(time.Hour)
	l.mu.Unlock()
	f()
	l.mu.Lock()
	l.pausedTo = time.Now().Add(time.Second)
	l.mu.Unlock()
}

func (l *exitLatency) counted(at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return at.Before(l.pausedFrom) || at.After(l.pausedTo)
}

func (l *exitLatency) stop() []time.Duration {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.ds...)
}
