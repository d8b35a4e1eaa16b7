package core

import (
	"context"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox removes the pod's containers and its sandbox, running or not. Idempotent.
func (s *Service) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	id := req.GetPodSandboxId()
	if id == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	sandbox, err := s.inspectSandbox(ctx, id)
	if err != nil {
		if isNotFoundStatus(err) && !isNotASandbox(err) {
			// Removed behind our back: remove what it left (containers, network, records).
			g, err := s.findGoneSandbox(ctx, id)
			if err != nil {
				return nil, err
			}
			if g != nil {
				id = g.id
				if err := s.removePodContainers(ctx, id, g.containers); err != nil {
					return nil, err
				}
			}
			s.tearDownGoneUpstream(id)
			if err := s.tearDownGoneSandbox(ctx, id); err != nil {
				return nil, err
			}
			s.releaseUpstreamLeftovers(ctx, id, nil, "")
			s.removeUpstreamCheckpoint(id)
			if g != nil {
				s.logs.Forget(id)
				s.sandboxes.remove(id)
			}
			return &runtimeapi.RemovePodSandboxResponse{}, nil
		}
		return nil, err
	}
	containers, err := s.podContainers(ctx, sandbox.ID)
	if err != nil {
		return nil, dockerError(err, "list containers of pod sandbox %q", id)
	}
	s.nriStopPodSandbox(ctx, sandbox, containers) // removed while it runs: plugins hear of its stop first
	if err := s.removePodContainers(ctx, id, containers); err != nil {
		return nil, err
	}
	// A sandbox removed without a stop first still releases its network.
	s.adoptForTearDown(ctx, sandbox)
	if err := s.tearDownSandboxNetwork(ctx, sandbox.ID, sandbox); err != nil {
		return nil, err
	}
	s.releaseUpstreamLeftovers(ctx, sandbox.ID, sandbox.Config.Labels, netNSPath(sandbox))
	if err := s.removeContainer(ctx, sandbox.ID); err != nil {
		return nil, dockerError(err, "remove pod sandbox %q", id)
	}
	// Upstream cri-dockerd's checkpoint goes with its sandbox, as upstream removed it.
	s.removeUpstreamCheckpoint(sandbox.ID)
	s.sandboxes.remove(sandbox.ID)
	s.nriRemovePodSandbox(ctx, nriPodOf(sandbox))
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// removePodContainers removes the containers of pod sandbox id.
func (s *Service) removePodContainers(ctx context.Context, id string, containers []container.Summary) error {
	for _, c := range containers {
		if err := s.removeContainer(ctx, c.ID); err != nil {
			return dockerError(err, "remove container %q of pod sandbox %q", c.ID, id)
		}
	}
	return nil
}
