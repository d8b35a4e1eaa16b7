package core

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PortForward prepares a port-forward session to a ready sandbox and returns its URL. The
// ports may be empty: SPDY clients name the port per connection.
func (s *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	id := req.GetPodSandboxId()
	if id == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	for _, p := range req.Port {
		if p <= 0 || p > 65535 {
			return nil, invalidf("port %d is not a TCP port (1-65535)", p)
		}
	}
	if s.opts.Streaming == nil {
		return nil, errNoStreaming("port-forward")
	}
	c, err := s.inspectSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.State == nil || !c.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "port-forward to pod sandbox %q: the sandbox is not ready (%s)", id, stateOf(c))
	}
	req = proto.Clone(req).(*runtimeapi.PortForwardRequest)
	req.PodSandboxId = c.ID
	return s.opts.Streaming.GetPortForward(req)
}
