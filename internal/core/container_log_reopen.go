package core

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/containerlog"
)

// ReopenContainerLog starts a new log file at the container's log path, after the kubelet
// renamed the old one (log rotation).
func (s *Service) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.State == nil || !c.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is not running: its log is complete and needs no reopening", id)
	}
	if err := s.logs.Reopen(c.ID); err != nil {
		if errors.Is(err, containerlog.ErrNotFollowed) {
			return nil, status.Errorf(codes.FailedPrecondition, "container %q has no CRI log file (no log_path, or created by another cri-dockerd)", id)
		}
		return nil, status.Errorf(codes.Internal, "reopen log of container %q: %v", id, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
