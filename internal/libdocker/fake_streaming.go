package libdocker

import (
	"bufio"
	"context"
	"io"
	"net"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
)

// AttachContainer attaches to a running container as Docker does: 409 for a stopped one. The
// fake container's process writes nothing and reads stdin to the end; the stream ends when the
// container stops or is removed, when the caller closes it, or when ctx ends.
func (f *Fake) AttachContainer(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	if err := f.enter(ctx, "AttachContainer"); err != nil {
		f.mu.Unlock()
		return types.HijackedResponse{}, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		f.mu.Unlock()
		return types.HijackedResponse{}, err
	}
	if !c.resp.State.Running {
		f.mu.Unlock()
		return types.HijackedResponse{}, dErr(cerrdefs.ErrConflict, "You cannot attach to a stopped container, start it first")
	}
	containerID := c.resp.ID
	f.mu.Unlock()

	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, server)
		close(done)
	}()
	go func() {
		defer server.Close()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-tick.C:
			}
			if !f.running(containerID) {
				return
			}
		}
	}()
	return types.HijackedResponse{Conn: client, Reader: bufio.NewReader(client)}, nil
}

// running reports whether a container exists and runs.
func (f *Fake) running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	return ok && c.resp.State.Running
}

// ResizeExec refuses an unknown exec (404) or one whose process is not running (409).
func (f *Fake) ResizeExec(ctx context.Context, execID string, height, width uint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ResizeExec"); err != nil {
		return err
	}
	e, ok := f.execs[execID]
	if !ok {
		return dErr(cerrdefs.ErrNotFound, "No such exec instance: %s", execID)
	}
	if !e.running {
		return dErr(cerrdefs.ErrConflict, "Exec %s is not running", execID)
	}
	return nil
}

// ResizeContainer refuses an unknown (404) or stopped (409) container, as Docker does.
func (f *Fake) ResizeContainer(ctx context.Context, id string, height, width uint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ResizeContainer"); err != nil {
		return err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	if !c.resp.State.Running {
		return dErr(cerrdefs.ErrConflict, "Container %s is not running", c.resp.ID)
	}
	return nil
}
