package core

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Once RemovePodSandbox removed what a sandbox removed behind our back left, it is forgotten at
// once: not counted in the pod metrics, listed or reported.
func TestRemoveOfAGoneSandboxForgetsIt(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	id, cfg := runPod(t, s, "a", "")
	createContainer(t, s, id, cfg, "app")
	removeBehindOurBack(t, fake, id)
	if st := sandboxStatus(t, s, id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("before the removal: %v", st)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if ids := s.sandboxes.ids(); len(ids) != 0 || s.PodsByHandler()[""] != 0 {
		t.Errorf("the index still knows %v (the pod metrics count %d)", ids, s.PodsByHandler()[""])
	}
	if got := listSandboxes(t, s, nil); len(got) != 0 {
		t.Errorf("ListPodSandbox after the removal: %v", got)
	}
	_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
}

// RemovePodSandbox removes every container of the pod, and fails when Docker cannot remove one.
func TestRemovePodSandboxRemovesEveryContainer(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	createContainer(t, s, podID, podCfg, "c1")
	createContainer(t, s, podID, podCfg, "c2")
	fake.InjectError("RemoveContainer", errors.New("driver overlay2 failed to remove root filesystem: device or resource busy"))
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err == nil {
		t.Error("RemovePodSandbox succeeded although Docker failed to remove a container")
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left after RemovePodSandbox", n)
	}
}
