package core

import (
	"context"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// UpdateContainerResources changes a container's CPU, memory, swap, cpuset and pids limits
// while it runs (Docker's update). Docker keeps a setting the update leaves at zero, and cannot
// change oom_score_adj or hugepage limits of a running container: the kubelet sends the
// oom_score_adj it created the container with, and hugepages are limited on the pod's cgroup.
func (s *Service) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if req.GetWindows() != nil {
		return nil, status.Error(codes.Unimplemented, "Windows container resources: cri-dockerd runs Linux containers")
	}
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	r := req.GetLinux()
	if r == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	res, files, err := s.dockerResources(r, false) // memory comes with swap: see carrySwap
	if err != nil {
		return nil, err
	}
	// On cgroup v1 there are no such files: the kernel's defaults are no-ops, the rest refused.
	// On v2 an update writes the defaults too: they may undo an earlier value.
	if !s.cgroups().V2() {
		if files = withoutKernelDefaults(files); len(files) > 0 {
			return nil, s.onCgroupV1(files[0])
		}
	}
	if res, err = s.nriUpdateContainer(ctx, c.ID, res); err != nil {
		return nil, err
	}
	warnings, err := s.docker.UpdateContainer(ctx, c.ID, container.UpdateConfig{Resources: res})
	if err != nil {
		if libdocker.IsNotFound(err) {
			return nil, notFoundf("container %q not found", id)
		}
		return nil, dockerError(err, "update resources of container %q", id)
	}
	for _, w := range warnings {
		s.log.WithField("container", id).Warnf("resource update: Docker says: %s", w)
	}
	if len(files) > 0 {
		if err := s.writeCgroupV2(ctx, c.ID, files); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "update resources of container %q: %v", id, err)
		}
	}
	s.stats.ForgetMeta(c.ID)
	s.nriPostUpdate(ctx, c.ID)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}
