package core

import (
	"context"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Exec, Attach and PortForward validate the request, check with one Docker inspect that the
// target is ours and running, and hand out a URL of the streaming server (see package
// streaming), where the session itself runs. Checking here, not only when the client connects,
// lets `kubectl exec` into a stopped container fail with a gRPC code and a clear message
// instead of a broken stream.

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
