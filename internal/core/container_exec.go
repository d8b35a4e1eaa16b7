package core

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec prepares a streaming exec session in a running container and returns its URL.
func (s *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if err := checkStreams("exec", req.GetContainerId(), req.GetStdin(), req.GetStdout(), req.GetStderr(), req.GetTty()); err != nil {
		return nil, err
	}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return nil, invalidf("cmd is required")
	}
	if s.opts.Streaming == nil {
		return nil, errNoStreaming("exec")
	}
	c, err := s.runningContainer(ctx, req.ContainerId, "exec in")
	if err != nil {
		return nil, err
	}
	req = proto.Clone(req).(*runtimeapi.ExecRequest)
	req.ContainerId = c.ID
	return s.opts.Streaming.GetExec(req)
}
