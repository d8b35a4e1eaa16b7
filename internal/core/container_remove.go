package core

import (
	"context"
	"github.com/containerd/nri/pkg/api"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// RemoveContainer removes a container, running or not. Idempotent. The removal is by the full
// ID, so that the log position record (kept by full ID) goes too when id is a prefix.
func (s *Service) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	c, gone, err := s.criContainerOrGone(ctx, id)
	if err != nil && !gone {
		return nil, err
	}
	if !gone {
		id = c.ID
	}
	// Gone already: what we hold for id (log record, image volume mounts) still goes.
	if err := s.removeContainer(ctx, id); err != nil {
		return nil, dockerError(err, "remove container %q", id)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// criContainerOrGone inspects the CRI container id (a full ID or a prefix). gone says that
// Docker has no container by that id, for the RPCs that succeed then (stop, remove); any other
// container, a sandbox or one not made through the CRI, is NotFound with gone false: a container
// RPC never acts on it.
func (s *Service) criContainerOrGone(ctx context.Context, id string) (c *container.InspectResponse, gone bool, err error) {
	c, err = s.docker.InspectContainer(ctx, id)
	switch {
	case libdocker.IsNotFound(err):
		return nil, true, notFoundf("container %q not found", id)
	case err != nil:
		return nil, false, dockerError(err, "inspect container %q", id)
	case !isCRIContainer(c):
		return nil, false, notFoundf("container %q not found: it is not a CRI container", id)
	}
	return c, false, nil
}

// removalWait bounds how long a removal waits for another one already in progress.
const removalWait = 10 * time.Second

// waitGone polls until Docker no longer knows the container, for at most limit.
func (s *Service) waitGone(ctx context.Context, id string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		if _, err := s.docker.InspectContainer(ctx, id); libdocker.IsNotFound(err) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeContainer force-removes a container with its anonymous volumes and forgets its log
// position; gone already is fine.
func (s *Service) removeContainer(ctx context.Context, id string) error {
	var pod *api.PodSandbox
	var ctr *api.Container
	if s.nriActive() {
		pod, ctr, _ = s.nriViews(ctx, id) // before it is gone
	}
	err := s.docker.RemoveContainer(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	// Docker answers a conflict while another call is already removing the container (e.g.
	// the rollback of a cancelled RunPodSandbox): wait for that removal to finish.
	if libdocker.IsConflict(err) && s.waitGone(ctx, id, removalWait) {
		err = nil
	}
	if err == nil || libdocker.IsNotFound(err) {
		s.nriRemoveContainer(ctx, pod, ctr)
		s.logs.Forget(id)
		// Image volumes are our mounts: release them also when the pod's removal removes
		// the container.
		if err := s.imageVolumes.ReleaseContainer(id); err != nil {
			return status.Errorf(codes.Internal, "release the image volumes of container %q: %v", id, err)
		}
		return nil
	}
	return err
}
