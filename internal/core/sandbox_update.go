package core

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdatePodSandboxResources accepts the kubelet's notice of a pod resize: the pod's cgroup is
// the kubelet's own, which it has already resized, and the sandbox container has no resources
// of its own. VM-based runtimes, which would size their VM from it, cannot be told through
// Docker.
func (s *Service) UpdatePodSandboxResources(_ context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	s.log.WithField("sandbox", req.PodSandboxId).Debug("pod resized; its cgroup is the kubelet's, nothing to change in Docker")
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
