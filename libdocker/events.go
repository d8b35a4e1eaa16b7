package libdocker

import (
	"context"

	"github.com/docker/docker/api/types/events"
)

// EventsClient is what the container event stream needs of Docker.
type EventsClient interface {
	// Events streams Docker's events that match opts until ctx ends or the connection breaks
	// (dockerd restarted): then the error channel receives the cause, is closed, and no more
	// messages come (the message channel is never closed: select on both). Bounded by ctx only.
	Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error)
}

func (c *client) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs, errs := c.api.Events(ctx, opts)
	out := make(chan error, 1)
	go func() {
		defer close(out)
		if err, ok := <-errs; ok {
			out <- classify(err)
		}
	}()
	return msgs, out
}
