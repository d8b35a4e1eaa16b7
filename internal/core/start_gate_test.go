package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// slowStarts is a Docker whose starts take a while, counting how many run at once.
type slowStarts struct {
	*libdocker.Fake
	mu         sync.Mutex
	now, peak  int
	startTakes time.Duration
}

func (d *slowStarts) StartContainer(ctx context.Context, id string) error {
	d.mu.Lock()
	d.now++
	d.peak = max(d.peak, d.now)
	d.mu.Unlock()
	time.Sleep(d.startTakes)
	d.mu.Lock()
	d.now--
	d.mu.Unlock()
	return d.Fake.StartContainer(ctx, id)
}

// With ConcurrentStarts set, RunPodSandbox and StartContainer ask Docker for at most that many
// starts at once, however many pods the kubelet starts together, and every pod starts.
func TestStartsAreBoundedByTheStartGate(t *testing.T) {
	fake := libdocker.NewFake()
	docker := &slowStarts{Fake: fake, startTakes: 20 * time.Millisecond}
	s := newTestServiceOn(t, fake, docker, Options{ConcurrentStarts: 2})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := sandboxConfig(fmt.Sprintf("gated-%d", i))
			sb, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				t.Error(err)
				return
			}
			c, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: containerConfig("app"), SandboxConfig: cfg})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if docker.peak != 2 {
		t.Errorf("%d Docker starts at once, want the gate's 2", docker.peak)
	}
	list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil || len(list.Containers) != 8 {
		t.Errorf("%d running containers (%v), want 8", len(list.GetContainers()), err)
	}
}
