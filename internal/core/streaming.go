package core

import (
	"context"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Exec, Attach and PortForward validate the request, check with one Docker inspect that the
// target is ours and running, and hand out a URL of the streaming server (see package
// streaming), where the session itself runs. Checking here, not only when the client connects,
// lets `kubectl exec` into a stopped container fail with a gRPC code and a clear message
// instead of a broken stream.

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

// checkStreams validates what exec and attach have in common, with containerd's rules.
func checkStreams(what, id string, stdin, stdout, stderr, tty bool) error {
	if id == "" {
		return invalidf("container_id is required")
	}
	if !stdin && !stdout && !stderr {
		return invalidf("%s: one of stdin, stdout and stderr must be set", what)
	}
	if tty && stderr {
		return invalidf("%s: tty and stderr cannot both be set: a terminal has a single output stream", what)
	}
	return nil
}

// runningContainer inspects a container of ours: NotFound when id names nothing or something
// that is not a CRI container, FailedPrecondition when it does not run.
func (s *Service) runningContainer(ctx context.Context, id, doing string) (*container.InspectResponse, error) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return nil, notFoundf("%s container %q: container not found", doing, id)
		}
		return nil, dockerError(err, "%s container %q: inspect", doing, id)
	}
	if !isCRIContainer(c) {
		return nil, notFoundf("%s container %q: container not found: it is not a CRI container", doing, id)
	}
	if c.State == nil || !c.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "%s container %q: the container is not running (%s)", doing, id, stateOf(c))
	}
	return c, nil
}

// stateOf is Docker's state word for a container, for messages.
func stateOf(c *container.InspectResponse) string {
	if c.State == nil || c.State.Status == "" {
		return "state unknown"
	}
	return "state " + c.State.Status
}

func errNoStreaming(what string) error {
	return status.Errorf(codes.Unimplemented, "%s: this cri-dockerd runs without a streaming server", what)
}
