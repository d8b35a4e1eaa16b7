package core

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Attach prepares a streaming attach session to a running container and returns its URL.
func (s *Service) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := checkStreams("attach", req.GetContainerId(), req.GetStdin(), req.GetStdout(), req.GetStderr(), req.GetTty()); err != nil {
		return nil, err
	}
	if s.opts.Streaming == nil {
		return nil, errNoStreaming("attach")
	}
	c, err := s.runningContainer(ctx, req.ContainerId, "attach to")
	if err != nil {
		return nil, err
	}
	req = proto.Clone(req).(*runtimeapi.AttachRequest)
	req.ContainerId = c.ID
	return s.opts.Streaming.GetAttach(req)
}
