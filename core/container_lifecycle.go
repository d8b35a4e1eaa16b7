package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

// StartContainer starts a created container. When the pod's runtime cannot run it, the error
// names the handler and what is wrong with the runtime.
func (s *Service) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if err := s.imageVolumes.ensureMounted(ctx, id); err != nil {
		return nil, err
	}
	err := s.docker.StartContainer(ctx, id)
	if err == nil {
		// One inspect for what the log follower needs: the full ID and the labels.
		if c, ierr := s.docker.InspectContainer(ctx, id); ierr == nil && c.Config != nil {
			s.followLog(c.ID, c.Config.Labels)
		}
		return &runtimeapi.StartContainerResponse{}, nil
	}
	if serr := s.imageVolumes.subPathStartError(id, err); serr != nil {
		return nil, serr
	}
	if libdocker.IsNotFound(err) && !errors.Is(err, libdocker.ErrRuntimeFailed) {
		return nil, notFoundf("container %q not found", id)
	}
	// Only a failure costs a lookup of the pod's runtime, for the error message.
	rt := podRuntime{}
	if c, ierr := s.docker.InspectContainer(ctx, id); ierr == nil && c.Config != nil {
		if _, srt, found, _ := s.sandboxes.lookup(ctx, s.docker, c.Config.Labels[sandboxIDLabel]); found {
			rt = srt
		}
	}
	return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("start container %q", id), rt)
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
	err := s.docker.StopContainer(ctx, id, time.Duration(boundedSeconds(req.Timeout))*time.Second)
	if err != nil && !libdocker.IsNotFound(err) {
		return nil, dockerError(err, "stop container %q", id)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer removes a container, running or not. Idempotent.
func (s *Service) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if err := s.removeContainer(ctx, id); err != nil {
		return nil, dockerError(err, "remove container %q", id)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}
