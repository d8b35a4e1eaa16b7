//go:build integration

package integration

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// events is one GetContainerEvents stream, read in the background; events of containers of
// other tests on the same dockerd are there too, so readers look for theirs.
type eventsStream struct {
	ch     chan *runtimeapi.ContainerEventResponse
	cancel context.CancelFunc
	err    error // why the stream ended, set before ch is closed
}

// openContainerEvents opens the stream and waits for its headers: from then on every change is
// reported.
func openContainerEvents(t testing.TB, d *Daemon) *eventsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := d.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		cancel()
		t.Fatalf("GetContainerEvents: %v", err)
	}
	if _, err := stream.Header(); err != nil {
		cancel()
		t.Fatalf("GetContainerEvents headers: %v", err)
	}
	es := &eventsStream{ch: make(chan *runtimeapi.ContainerEventResponse, 1000), cancel: cancel}
	go func(stream grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse]) {
		for {
			ev, err := stream.Recv()
			if err != nil {
				es.err = err
				close(es.ch)
				return
			}
			es.ch <- ev
		}
	}(stream)
	t.Cleanup(cancel)
	return es
}

// waitEvent returns the next event of type typ for container id, skipping others.
func (es *eventsStream) waitEvent(t testing.TB, id string, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	t.Helper()
	timeout := time.After(testutil.Scaled(30 * time.Second))
	for {
		select {
		case ev, ok := <-es.ch:
			if !ok {
				t.Fatalf("event stream ended while waiting for %v of %.12s: %v", typ, id, es.err)
			}
			if ev.ContainerId == id && ev.ContainerEventType == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %.12s within 30 s", typ, id)
		}
	}
}

// TestContainerEventsFollowDocker checks that changes made through CRI and behind its back
// (docker stop) reach the kubelet as events with the pod's statuses.
func TestContainerEventsFollowDocker(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	es := openContainerEvents(t, d)
	podCfg := newPodConfig(t, "events")
	sandboxID := runPod(t, d, podCfg, "")
	es.waitEvent(t, sandboxID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	ev := es.waitEvent(t, sandboxID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if ev.PodSandboxStatus.GetMetadata().GetUid() != podCfg.Metadata.Uid || ev.PodSandboxStatus.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox started: sandbox status %v", ev.PodSandboxStatus)
	}

	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	es.waitEvent(t, ctrID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	startContainer(t, d, ctrID)
	ev = es.waitEvent(t, ctrID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if len(ev.ContainersStatuses) != 1 || ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("started: container statuses %v", ev.ContainersStatuses)
	}

	// Behind cri-dockerd's back: the event comes from Docker's stream.
	timeout := 0
	if err := suite.docker.ContainerStop(t.Context(), ctrID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	ev = es.waitEvent(t, ctrID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if len(ev.ContainersStatuses) != 1 || ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("stopped: container statuses %v", ev.ContainersStatuses)
	}
	if _, err := d.Runtime.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatal(err)
	}
	es.waitEvent(t, ctrID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)

	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	es.waitEvent(t, sandboxID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	ev = es.waitEvent(t, sandboxID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if ev.PodSandboxStatus.GetId() != sandboxID || ev.PodSandboxStatus.GetMetadata().GetUid() != podCfg.Metadata.Uid {
		t.Errorf("sandbox deleted: sandbox status %v, want its last status", ev.PodSandboxStatus)
	}
}

// BenchmarkContainerEventLatency measures the time from `docker start` (the Engine API call,
// made directly) to the CONTAINER_STARTED event on a GetContainerEvents stream.
//
//	go test -tags integration -run XXX -bench ContainerEventLatency -benchtime 20x ./integration/
func BenchmarkContainerEventLatency(b *testing.B) {
	d := StartDaemon(b, "--network-plugin=")
	es := openContainerEvents(b, d)
	podCfg := newPodConfig(b, "bench-events")
	sandboxID := runPod(b, d, podCfg, "")
	ctrID := createContainer(b, d, sandboxID, podCfg, containerConfig("app", sleeper))
	timeout := 0
	var total, afterReturn time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := suite.docker.ContainerStart(b.Context(), ctrID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		es.waitEvent(b, ctrID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
		total += time.Since(start)
		afterReturn += time.Since(returned)
		b.StopTimer()
		if err := suite.docker.ContainerStop(b.Context(), ctrID, container.StopOptions{Timeout: &timeout}); err != nil {
			b.Fatal(err)
		}
		es.waitEvent(b, ctrID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "start-to-event-ms/op")
	// The event may come before `docker start` returns; then this part is 0 or close to it.
	b.ReportMetric(float64(afterReturn.Microseconds())/1000/float64(b.N), "start-return-to-event-ms/op")
}

// TestContainerEventsSurviveDockerRestart restarts a private dockerd under an open
// GetContainerEvents stream. What internal/core/events.go promises: the stream itself never ends (the
// watcher reconnects to Docker with backoff), what changed while it was away is reported from a
// relist, events flow again after the reconnect, and every event carries the pod's complete
// statuses (the kubelet takes them as the pod's whole state).
//
//  1. A plain restart: the pod's sandbox and container, killed by dockerd's shutdown (20.10,
//     no live-restore), are reported stopped; CRI calls after it give events again.
//  2. cri-dockerd frozen (SIGSTOP) across the restart and while containers are started,
//     removed and created behind its back: all of it comes from the relist when it resumes.
//  3. cri-dockerd resumed while dockerd is down: the die events dockerd sent at shutdown reach
//     it when nothing can be inspected; they must not go out half empty but whole after the
//     reconnect.
func TestContainerEventsSurviveDockerRestart(t *testing.T) {
	start := time.Now()
	pd := StartPrivateDockerd(t, busyboxImage, pauseImage)
	d := StartDaemon(t, "--docker-endpoint", pd.Host)
	es := openContainerEvents(t, d)
	const (
		created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
		started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
		stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
		deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	)
	freeze := func(on bool) {
		t.Helper()
		sig := syscall.SIGCONT
		if on {
			sig = syscall.SIGSTOP
		}
		if err := d.cmd.Process.Signal(sig); err != nil {
			t.Fatalf("%v cri-dockerd: %v", sig, err)
		}
	}
	t.Cleanup(func() { _ = d.cmd.Process.Signal(syscall.SIGCONT) }) // before its Stop
	reconnects := func() int { return strings.Count(d.readLog(), "following Docker's events again") }
	// awaitReconnect waits until the watcher follows Docker again after n earlier reconnects.
	awaitReconnect := func(n int, since time.Time, sinceWhat, what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { return reconnects() > n },
			"%s: cri-dockerd did not follow Docker's events again within 30 s", what)
		t.Logf("%s: following Docker's events again %v after %s", what, time.Since(since).Round(time.Millisecond), sinceWhat)
	}
	// expect reads events until each of want (container id -> event types, in order) came,
	// failing on an event for which pods has no entry or whose container statuses are not
	// exactly that pod's containers (by id) then.
	type pod struct {
		uid        string
		containers []string
	}
	expect := func(what string, pods map[string]pod, want map[string][]runtimeapi.ContainerEventType) {
		t.Helper()
		got := map[string][]runtimeapi.ContainerEventType{}
		done := func() bool {
			for id, types := range want {
				i := 0
				for _, typ := range got[id] {
					if i < len(types) && typ == types[i] {
						i++
					}
				}
				if i < len(types) {
					return false
				}
			}
			return true
		}
		timeout := time.After(testutil.Scaled(30 * time.Second))
		for !done() {
			select {
			case ev, ok := <-es.ch:
				if !ok {
					t.Fatalf("%s: the event stream ended (%v); got %v", what, es.err, got)
				}
				got[ev.ContainerId] = append(got[ev.ContainerId], ev.ContainerEventType)
				sb := ev.PodSandboxStatus
				p, ok := pods[sb.GetId()]
				if !ok || sb.GetMetadata().GetUid() != p.uid {
					t.Errorf("%s: %v of %.12s: sandbox status %v, want the pod's", what, ev.ContainerEventType, ev.ContainerId, sb)
					continue
				}
				var ids []string
				for _, c := range ev.ContainersStatuses {
					ids = append(ids, c.Id)
				}
				slices.Sort(ids)
				if wantIDs := slices.Sorted(slices.Values(p.containers)); !slices.Equal(ids, wantIDs) {
					t.Errorf("%s: %v of %.12s: statuses of containers %.12q, want %.12q", what, ev.ContainerEventType, ev.ContainerId, ids, wantIDs)
				}
			case <-timeout:
				t.Fatalf("%s: events within 30 s: %v, want at least %v", what, got, want)
			}
		}
		t.Logf("%s: events %v", what, got)
	}

	// 1. A plain restart.
	pod1 := hostNetworkPod(newPodConfig(t, "evrestart"))
	s1 := runPod(t, d, pod1, "")
	a := createContainer(t, d, s1, pod1, containerConfig("a", sleeper))
	startContainer(t, d, a)
	es.waitEvent(t, a, started)
	n := reconnects()
	t0 := time.Now()
	pd.Stop()
	t1 := time.Now()
	pd.Start()
	t.Logf("1: dockerd stopped in %v, answered again %v later", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	expect("1: restart", map[string]pod{s1: {pod1.Metadata.Uid, []string{a}}}, map[string][]runtimeapi.ContainerEventType{s1: {stopped}, a: {stopped}})
	awaitReconnect(n, t1, "dockerd answered", "1")
	if _, err := d.Runtime.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: a}); err != nil {
		t.Fatal(err)
	}
	es.waitEvent(t, a, deleted)
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s1}); err != nil {
		t.Fatal(err)
	}
	es.waitEvent(t, s1, deleted)

	// 2. Changes behind the back of a frozen cri-dockerd.
	pod2 := hostNetworkPod(newPodConfig(t, "evfrozen"))
	s2 := runPod(t, d, pod2, "")
	d2 := createContainer(t, d, s2, pod2, containerConfig("d", sleeper)) // runs, dies in the restart
	startContainer(t, d, d2)
	e := createContainer(t, d, s2, pod2, containerConfig("e", sleeper)) // started behind its back
	f := createContainer(t, d, s2, pod2, containerConfig("f", sleeper)) // removed behind its back
	es.waitEvent(t, f, created)
	n = reconnects()
	freeze(true)
	pd.Restart()
	for _, id := range []string{s2, e} {
		if err := pd.Client.ContainerStart(t.Context(), id, container.StartOptions{}); err != nil {
			t.Fatalf("docker start %.12s: %v", id, err)
		}
	}
	if err := pd.Client.ContainerRemove(t.Context(), f, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	// Created the way cri-dockerd names and labels a container of the pod.
	ei, err := pd.Client.ContainerInspect(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	born, err := pd.Client.ContainerCreate(t.Context(), ei.Config, ei.HostConfig, nil, nil, strings.Replace(strings.TrimPrefix(ei.Name, "/"), "k8s_e_", "k8s_born_", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Client.ContainerStart(t.Context(), born.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	t1 = time.Now()
	freeze(false)
	expect("2: frozen", map[string]pod{s2: {pod2.Metadata.Uid, []string{d2, e, born.ID}}}, map[string][]runtimeapi.ContainerEventType{
		d2: {stopped}, s2: {started}, e: {started}, f: {deleted}, born.ID: {created, started},
	})
	awaitReconnect(n, t1, "SIGCONT", "2")

	// 3. cri-dockerd reads dockerd's last events while dockerd is down.
	n = reconnects()
	freeze(true)
	pd.Stop()
	before := strings.Count(d.readLog(), "component=events")
	freeze(false)
	testutil.PollUntil(10*time.Second, 10*time.Millisecond, func() bool { return strings.Count(d.readLog(), "component=events") != before })
	time.Sleep(200 * time.Millisecond) // a reconnect attempt or two against the stopped dockerd
	pd.Start()
	t1 = time.Now()
	expect("3: down", map[string]pod{s2: {pod2.Metadata.Uid, []string{d2, e, born.ID}}}, map[string][]runtimeapi.ContainerEventType{
		s2: {stopped}, e: {stopped}, born.ID: {stopped},
	})
	awaitReconnect(n, t1, "dockerd answered", "3")
	if _, err := d.Runtime.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: born.ID}); err != nil {
		t.Fatal(err)
	}
	es.waitEvent(t, born.ID, deleted)

	// The one stream lived through it all.
	select {
	case ev, ok := <-es.ch:
		if !ok {
			t.Fatalf("the event stream ended: %v", es.err)
		}
		t.Logf("one more event: %v of %.12s", ev.ContainerEventType, ev.ContainerId)
	default:
	}
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}
