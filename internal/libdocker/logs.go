package libdocker

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/container"
)

// LogClient is what container logs need of Docker.
type LogClient interface {
	// ContainerLogs streams a container's logs. Without a TTY the stream is multiplexed: one
	// stdcopy frame per log message; with Timestamps each message starts with its RFC 3339
	// time and a space. With Follow the stream ends when the container stops.
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
}

// ContainerLogs is bounded by the caller's context only: a followed stream lives as long as
// the container.
func (c *client) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	rc, err := c.api.ContainerLogs(ctx, id, opts)
	return rc, classify(err)
}
