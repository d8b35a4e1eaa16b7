package core

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

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
	s.nriStopContainer(ctx, c.ID)
	return &runtimeapi.StopContainerResponse{}, nil
}
