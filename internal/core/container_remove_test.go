package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestRemoveWaitsForARemovalAlreadyInProgress(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, _ := runPod(t, s, "p", "")
	// Docker refuses while another removal runs; that removal then finishes.
	fake.InjectError("RemoveContainer", fmt.Errorf("%w: removal of container %s is already in progress", cerrdefs.ErrConflict, podID))
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = fake.RemoveContainer(context.Background(), podID, container.RemoveOptions{Force: true})
	}()
	if _, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("RemovePodSandbox during another removal: %v", err)
	}
	// Success means gone: the call returned only once the other removal had finished.
	if _, err := fake.InspectContainer(context.Background(), podID); !libdocker.IsNotFound(err) {
		t.Errorf("RemovePodSandbox returned while the sandbox container still exists (inspect: %v)", err)
	}
	if pods, err := s.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("ListPodSandbox after the removal = %v, %v; want none", pods, err)
	}
}
