package libdocker

import (
	"context"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
)

// StreamingClient is what exec, attach and port-forward need of Docker beyond Client.
type StreamingClient interface {
	// AttachContainer attaches to the stdio of a running container. The stream is multiplexed
	// (stdcopy) unless the container has a TTY, and lives as long as the caller's context or
	// until the container exits; it is not bounded by the request timeout.
	AttachContainer(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error)
	// ResizeExec sets the TTY size of an exec'd process (Docker waits for it to start).
	ResizeExec(ctx context.Context, execID string, height, width uint) error
	// ResizeContainer sets the TTY size of a running container.
	ResizeContainer(ctx context.Context, id string, height, width uint) error
}

func (c *client) AttachContainer(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	resp, err := c.api.ContainerAttach(ctx, id, opts)
	return resp, classify(err)
}

func (c *client) ResizeExec(ctx context.Context, execID string, height, width uint) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return classify(c.api.ContainerExecResize(ctx, execID, container.ResizeOptions{Height: height, Width: width}))
}

func (c *client) ResizeContainer(ctx context.Context, id string, height, width uint) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return classify(c.api.ContainerResize(ctx, id, container.ResizeOptions{Height: height, Width: width}))
}
