package libdocker

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// ExecResult is what a fake exec'd process does: it writes its output after Delay and exits.
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
	Delay          time.Duration
	// Release, when set, holds the process's output and exit until it is closed (after Delay).
	Release <-chan struct{}
}

// ExecHandler decides what an exec'd command does in the fake.
type ExecHandler func(containerID string, cmd []string) ExecResult

type fakeExec struct {
	id, containerID string
	cmd             []string
	pid             int
	running         bool
	exitCode        int
	killed          chan struct{}
}

// SetExecHandler sets what exec'd commands do; by default they print nothing and exit 0.
func (f *Fake) SetExecHandler(h ExecHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execHandler = h
}

// CreateExec refuses a container that is not running, as Docker does (409 conflict).
func (f *Fake) CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "CreateExec"); err != nil {
		return "", err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return "", err
	}
	if !c.resp.State.Running {
		return "", dErr(cerrdefs.ErrConflict, "Container %s is not running", c.resp.ID)
	}
	if len(opts.Cmd) == 0 {
		return "", dErr(cerrdefs.ErrInvalidArgument, "No exec command specified")
	}
	if f.execs == nil {
		f.execs = map[string]*fakeExec{}
	}
	e := &fakeExec{id: randomID(), containerID: c.resp.ID, cmd: append([]string(nil), opts.Cmd...), killed: make(chan struct{})}
	f.execs[e.id] = e
	return e.id, nil
}

// AttachExec starts the process and streams its multiplexed output, as Docker does without a TTY.
func (f *Fake) AttachExec(ctx context.Context, execID string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	if err := f.enter(ctx, "AttachExec"); err != nil {
		f.mu.Unlock()
		return types.HijackedResponse{}, err
	}
	e, ok := f.execs[execID]
	if !ok {
		f.mu.Unlock()
		return types.HijackedResponse{}, dErr(cerrdefs.ErrNotFound, "No such exec instance: %s", execID)
	}
	result := ExecResult{}
	if f.execHandler != nil {
		result = f.execHandler(e.containerID, e.cmd)
	}
	f.nextPid++
	e.pid, e.running = f.nextPid, true
	f.mu.Unlock()

	client, server := net.Pipe()
	go func() {
		defer server.Close()
		select {
		case <-time.After(result.Delay):
		case <-e.killed:
			return
		case <-ctx.Done():
			return
		}
		if result.Release != nil {
			select {
			case <-result.Release:
			case <-e.killed:
				return
			case <-ctx.Done():
				return
			}
		}
		var buf bytes.Buffer
		if result.Stdout != "" {
			_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write([]byte(result.Stdout))
		}
		if result.Stderr != "" {
			_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stderr).Write([]byte(result.Stderr))
		}
		_, _ = server.Write(buf.Bytes())
		f.mu.Lock()
		e.running, e.exitCode = false, result.ExitCode
		f.mu.Unlock()
	}()
	return types.HijackedResponse{Conn: client, Reader: bufio.NewReader(client)}, nil
}

// KillExec kills a running exec'd process: it exits with 137, as after SIGKILL.
func (f *Fake) KillExec(ctx context.Context, execID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "KillExec"); err != nil {
		return err
	}
	e, ok := f.execs[execID]
	if !ok {
		return dErr(cerrdefs.ErrNotFound, "No such exec instance: %s", execID)
	}
	if e.running {
		e.running, e.exitCode = false, 137
		close(e.killed)
	}
	return nil
}

// ExecRunning reports whether an exec'd process of the container still runs (not killed).
func (f *Fake) ExecRunning(containerID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.execs {
		if e.running && e.containerID == containerID {
			n++
		}
	}
	return n
}

// InspectExec reports a process's state and exit code.
func (f *Fake) InspectExec(ctx context.Context, execID string) (container.ExecInspect, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "InspectExec"); err != nil {
		return container.ExecInspect{}, err
	}
	e, ok := f.execs[execID]
	if !ok {
		return container.ExecInspect{}, dErr(cerrdefs.ErrNotFound, "No such exec instance: %s", execID)
	}
	return container.ExecInspect{ExecID: e.id, ContainerID: e.containerID, Running: e.running, ExitCode: e.exitCode, Pid: e.pid}, nil
}
