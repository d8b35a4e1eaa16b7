//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// events is one GetContainerEvents stream, read in the background; events of containers of
// other tests on the same dockerd are there too, so readers look for theirs.
type eventsStream struct {
	ch     chan *runtimeapi.ContainerEventResponse
	cancel context.CancelFunc
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
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-es.ch:
			if !ok {
				t.Fatalf("event stream ended while waiting for %v of %.12s", typ, id)
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
