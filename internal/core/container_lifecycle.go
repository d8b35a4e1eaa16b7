package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/core/startgate"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// StartContainer starts a created container. When the pod's runtime cannot run it, the error
// names the handler and what is wrong with the runtime.
func (s *Service) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	// One inspect tells a CRI container from anything else and gives what the log follower
	// needs: the full ID and the labels.
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.imageVolumes.ensureMounted(ctx, c.ID); err != nil {
		return nil, err
	}
	err = s.startContainer(ctx, c.ID, startgate.Container)
	if err == nil {
		s.followLog(c.ID, c.Config.Labels)
		return &runtimeapi.StartContainerResponse{}, nil
	}
	if serr := s.imageVolumes.subPathStartError(c.ID, err); serr != nil {
		return nil, serr
	}
	if libdocker.IsNotFound(err) && !errors.Is(err, libdocker.ErrRuntimeFailed) {
		return nil, notFoundf("container %q not found", id)
	}
	s.reclaimFailedStart(ctx, c.ID, err)
	// Only a failure costs a lookup of the pod's runtime, for the error message.
	rt := podRuntime{}
	if _, srt, found, _ := s.sandboxes.lookup(ctx, s.docker, c.Config.Labels[sandboxIDLabel]); found {
		rt = srt
	}
	return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("start container %q", id), rt)
}

// startWaitBound is how long a start waits for a slot of the start gate before it goes in
// without one (a runtime whose starts hang holds the slots).
const startWaitBound = time.Minute

// startContainer asks Docker to start container id once the start gate admits it.
func (s *Service) startContainer(ctx context.Context, id string, p startgate.Priority) error {
	leave, err := s.starts.Enter(ctx, p)
	if err != nil {
		return err
	}
	defer leave()
	return s.docker.StartContainer(ctx, id)
}

// StopContainer stops a container, killing it after timeout seconds. Idempotent: an unknown or
// stopped container is a success.
func (s *Service) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if req.Timeout < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	c, gone, err := s.criContainerOrGone(ctx, id)
	if gone {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	err = s.docker.StopContainer(ctx, c.ID, time.Duration(boundedSeconds(req.Timeout))*time.Second)
	if err != nil && !libdocker.IsNotFound(err) {
		return nil, dockerError(err, "stop container %q", id)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

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
