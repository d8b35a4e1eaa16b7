package core

import (
	"context"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
)

// sandboxStopTimeout is the grace of a sandbox's containers and of the pause container. The
// kubelet stops containers with their own grace period before it stops the sandbox, so what is
// left here only gets a short one.
const sandboxStopTimeout = 10 * time.Second

// StopPodSandbox stops every container of the pod, tears down the pod's network (CNI DEL, while
// its namespace still exists) and stops the sandbox. Idempotent: an unknown or already stopped
// sandbox is a success, as the CRI asks; the network of a sandbox whose container is gone is
// still torn down from its checkpoint.
func (s *Service) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	id := req.GetPodSandboxId()
	if id == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	sandbox, err := s.inspectSandbox(ctx, id)
	if err != nil {
		if isNotFoundStatus(err) && !isNotASandbox(err) {
			// Removed behind our back: stop what it left, then tear its network down.
			g, err := s.findGoneSandbox(ctx, id)
			if err != nil {
				return nil, err
			}
			if g != nil {
				id = g.id
				if err := s.stopPodContainers(ctx, id, g.containers); err != nil {
					return nil, err
				}
			}
			s.tearDownGoneUpstream(id)
			if err := s.tearDownGoneSandbox(ctx, id); err != nil {
				return nil, err
			}
			s.releaseUpstreamLeftovers(ctx, id, nil, "")
			return &runtimeapi.StopPodSandboxResponse{}, nil
		}
		return nil, err
	}
	containers, err := s.podContainers(ctx, sandbox.ID)
	if err != nil {
		return nil, dockerError(err, "list containers of pod sandbox %q", id)
	}
	// The containers stop while the network is torn down: its namespace is the pause
	// container's, which stops last. A pod whose containers still run (crictl stopp, a kubelet
	// that lost track of them) so waits for the longer of the two, not their sum.
	stopped := make(chan error, 1)
	go func() {
		var err error
		if p := supervise.Run(s.log, "stop the containers of pod sandbox "+id, func() { err = s.stopPodContainers(ctx, id, containers) }); p != nil {
			err = status.Errorf(codes.Internal, "%v", p)
		}
		stopped <- err
	}()
	s.adoptForTearDown(ctx, sandbox)
	netErr := s.tearDownSandboxNetwork(ctx, sandbox.ID, sandbox)
	if err := <-stopped; err != nil {
		return nil, err
	}
	s.nriStopPodSandbox(ctx, sandbox, containers)
	if netErr != nil {
		return nil, netErr
	}
	s.releaseUpstreamLeftovers(ctx, sandbox.ID, sandbox.Config.Labels, netNSPath(sandbox))
	if sandbox.State != nil && sandbox.State.Running {
		if err := s.docker.StopContainer(ctx, sandbox.ID, sandboxStopTimeout); err != nil && !libdocker.IsNotFound(err) {
			return nil, dockerError(err, "stop pod sandbox %q", id)
		}
	}
	s.sandboxes.observe(sandbox.ID, "die") // at once: its die event may come after the next CreateContainer
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// stopPodContainers stops the containers of pod sandbox id that run, all at once: each may
// take its grace period.
func (s *Service) stopPodContainers(ctx context.Context, id string, containers []container.Summary) error {
	var running []string
	for _, c := range containers {
		if c.State == "running" || c.State == "restarting" || c.State == "paused" {
			running = append(running, c.ID)
		}
	}
	errs := make([]error, len(running))
	var wg sync.WaitGroup
	for i, cid := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p := supervise.Run(s.log, "stop container "+cid, func() { errs[i] = s.docker.StopContainer(ctx, cid, sandboxStopTimeout) }); p != nil {
				errs[i] = p
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !libdocker.IsNotFound(err) {
			return dockerError(err, "stop container %q of pod sandbox %q", running[i], id)
		}
	}
	return nil
}

// podContainers lists every container (any state) of a sandbox.
func (s *Service) podContainers(ctx context.Context, sandboxID string) ([]container.Summary, error) {
	return s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(
		containerTypeLabel+"="+containerTypeContainer, sandboxIDLabel+"="+sandboxID)})
}
