package core

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// createInto is CreateContainer of a container named name into sandbox id.
func createInto(s *Service, id string, cfg *runtimeapi.PodSandboxConfig, name string) error {
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: containerConfig(name), SandboxConfig: cfg})
	return err
}

// refusedOnceSeen waits (bounded) until the service has seen, from Docker's events, that sandbox
// id ended behind its back as ending says (a removal's die event comes before its destroy), then
// checks that CreateContainer into it fails with code.
func refusedOnceSeen(t *testing.T, s *Service, id string, cfg *runtimeapi.PodSandboxConfig, ending sandboxEnding, code codes.Code) {
	t.Helper()
	if !testutil.PollUntil(10*time.Second, 5*time.Millisecond, func() bool { return s.sandboxes.ended(id) == ending }) {
		t.Fatalf("sandbox %.12s ended behind our back: not seen from Docker's events within 10 s (%v)", id, s.sandboxes.ended(id))
	}
	wantCode(t, createInto(s, id, cfg, "late"), code)
}

// Docker creates a container whose network mode joins a container it no longer has (or one that
// is stopped); such a container has no pod. CreateContainer refuses a sandbox removed behind our
// back (NotFound) or stopped (FailedPrecondition, as containerd and CRI-O refuse a sandbox that is
// not ready), without an inspect of the sandbox per container.
func TestCreateContainerRefusesASandboxThatEnded(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()

	removed, removedCfg := runPod(t, s, "removed", "")
	removeBehindOurBack(t, fake, removed)
	refusedOnceSeen(t, s, removed, removedCfg, sandboxRemoved, codes.NotFound)

	killed, killedCfg := runPod(t, s, "killed", "")
	if err := fake.StopContainer(ctx, killed, 0); err != nil { // docker kill, past the service
		t.Fatal(err)
	}
	refusedOnceSeen(t, s, killed, killedCfg, sandboxExited, codes.FailedPrecondition)

	stopped, stoppedCfg := runPod(t, s, "stopped", "")
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: stopped}); err != nil {
		t.Fatal(err)
	}
	// Our own stop is known at once, without waiting for its event.
	wantCode(t, createInto(s, stopped, stoppedCfg, "app"), codes.FailedPrecondition)

	// A running sandbox still takes containers, and none of the refusals created one.
	live, liveCfg := runPod(t, s, "live", "")
	createContainer(t, s, live, liveCfg, "app")
	list, err := fake.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel + "=" + containerTypeContainer)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("%d containers, want only the running pod's", len(list))
	}
}

// After a restart, a sandbox that had exited is known from the list at start.
func TestCreateContainerRefusesASandboxThatExitedBeforeARestart(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, cfg := runPod(t, s, "a", "")
	if err := fake.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = newTestService(t, fake, Options{})
	wantCode(t, createInto(s, id, cfg, "app"), codes.FailedPrecondition)
}

// StopPodSandbox and RemovePodSandbox of an ID that names a Docker container other than a
// sandbox answer NotFound and leave it alone; of an ID Docker does not know, they succeed
// (idempotent).
func TestSandboxRPCsRefuseContainersThatAreNotSandboxes(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	id, cfg := runPod(t, s, "a", "")
	app := startedContainer(t, s, id, cfg, "app")
	foreign, err := fake.CreateContainer(ctx, "docker-run", &container.Config{Image: testImage}, &container.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.StartContainer(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{app, foreign} {
		_, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: target})
		wantCode(t, err, codes.NotFound)
		_, err = s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: target})
		wantCode(t, err, codes.NotFound)
		if !running(t, fake, target) {
			t.Errorf("%.12s was stopped", target)
		}
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "0123456789ab"}); err != nil {
		t.Errorf("RemovePodSandbox of an unknown ID: %v, want success", err)
	}
}
