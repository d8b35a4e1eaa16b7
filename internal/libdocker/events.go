package libdocker

import (
	"context"
	"time"

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

// RetryWait waits before a call that failed is tried again: for backoff when Docker answers a
// ping, or, when it does not (dockerd down or restarting), until it answers one, pinging every
// interval. A backoff that grew while dockerd was down would delay the retry by up to its
// maximum after dockerd is back; a ping to a daemon that is down is one failed dial, and one to
// a daemon that is starting waits until it serves. It returns ctx's error if ctx ends first.
func RetryWait(ctx context.Context, ping func(context.Context) error, interval, backoff time.Duration) error {
	if ping(ctx) == nil {
		return sleep(ctx, backoff)
	}
	for {
		if err := sleep(ctx, interval); err != nil {
			return err
		}
		if ping(ctx) == nil {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
