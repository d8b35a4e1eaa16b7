package core

import (
	"context"
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// A container Docker is restarting (its restart policy) is stopped with its pod, as a running
// one is.
func TestStopPodSandboxStopsARestartingContainer(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	if err := fake.RestartingContainer(id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	c, err := fake.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Running || c.State.Restarting {
		t.Errorf("after StopPodSandbox the container is %q, want exited", c.State.Status)
	}
}

// StopPodSandbox asks Docker to stop the containers that run, not those that already exited
// or never started: Docker sees one stop for the running container (and one for the sandbox).
func TestStopPodSandboxStopsOnlyTheContainersThatRun(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	run := startedContainer(t, s, podID, podCfg, "run")
	exited := startedContainer(t, s, podID, podCfg, "exited")
	if err := fake.ExitContainer(exited, 0); err != nil {
		t.Fatal(err)
	}
	created := createContainer(t, s, podID, podCfg, "created")
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if _, ok := fake.LastStopTimeout(run); !ok {
		t.Errorf("the running container was not stopped")
	}
	for name, id := range map[string]string{"exited": exited, "created": created} {
		if _, ok := fake.LastStopTimeout(id); ok {
			t.Errorf("the %s container was sent a stop", name)
		}
	}
}

// The stop of a sandbox removed behind our back fails while its network cannot be torn down,
// keeping the checkpoint for the next try; once it can, the stop succeeds.
func TestStopOfAGoneSandboxFailsWhileItsTearDownFails(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	ctx := context.Background()
	id, _ := runPod(t, s, "a", "")
	removeBehindOurBack(t, fake, id)
	net.mu.Lock()
	net.tearDownErr = errors.New("CNI DEL: plugin failed")
	net.mu.Unlock()
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err == nil {
		t.Fatal("StopPodSandbox succeeded although the DEL failed")
	}
	if files := checkpointFiles(t, root); len(files) != 1 {
		t.Errorf("checkpoints after a failed DEL: %v, want the sandbox's", files)
	}
	net.mu.Lock()
	net.tearDownErr = nil
	net.mu.Unlock()
	resp, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	if err != nil || resp == nil {
		t.Fatalf("StopPodSandbox once the DEL works = %v, %v", resp, err)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints after the DEL: %v", files)
	}
}

// Docker failing to stop the sandbox or one of its containers fails StopPodSandbox; a container
// already gone does not.
func TestStopPodSandboxReportsDockersStopFailures(t *testing.T) {
	ctx := context.Background()
	for _, withContainer := range []bool{false, true} {
		fake := libdocker.NewFake()
		s := newTestService(t, fake, Options{})
		podID, podCfg := runPod(t, s, "p", "")
		if withContainer {
			startedContainer(t, s, podID, podCfg, "c")
		}
		fake.InjectError("StopContainer", errors.New("cannot kill container: permission denied"))
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err == nil {
			t.Errorf("container %v: StopPodSandbox succeeded although Docker failed to stop", withContainer)
		}
		fake.InjectError("StopContainer", fmt.Errorf("%w: No such container", cerrdefs.ErrNotFound))
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
			t.Errorf("container %v: StopPodSandbox failed for a container gone meanwhile: %v", withContainer, err)
		}
	}
}
