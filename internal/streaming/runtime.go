package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/sirupsen/logrus"
	cristreaming "k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/cri-dockerd/cri-dockerd/internal/execkill"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// cleanupTimeout bounds the Docker calls made after a session ended (kill, inspect).
const cleanupTimeout = 10 * time.Second

// Runtime runs exec, attach and port-forward sessions on Docker for cri-streaming's server.
// A session ends when its process (or container, or TCP connection) ends, when the client goes
// away (a write to it fails, or its stdin ends with an error), or when the server stops. An
// exec'd process whose session is cut short is killed, so no `docker exec` outlives its client.
type Runtime struct {
	docker libdocker.Client
	log    *logrus.Entry
	// base ends every session when the server stops.
	base context.Context
	stop context.CancelFunc
	// OnSession, when set, hears each session start (+1) and end (-1), by kind.
	OnSession func(kind string, delta int)
	// killer kills the process of a session that ended early, also inside a sandboxed runtime.
	killer execkill.Killer
	// portForwards counts the port-forward sessions of each sandbox, at most maxPortForwards;
	// halfClosedIdle ends one whose client ended its side (HalfClosedIdleTimeout, but in tests).
	portForwards    sandboxSessions
	maxPortForwards int
	halfClosedIdle  time.Duration
}

// session reports a session of kind and returns the function that reports its end.
func (r *Runtime) session(kind string) func() {
	if r.OnSession == nil {
		return func() {}
	}
	r.OnSession(kind, 1)
	return func() { r.OnSession(kind, -1) }
}

var _ cristreaming.Runtime = (*Runtime)(nil)

// NewRuntime builds a Runtime on docker.
func NewRuntime(docker libdocker.Client, log *logrus.Entry) *Runtime {
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	base, stop := context.WithCancel(context.Background())
	return &Runtime{docker: docker, log: log, base: base, stop: stop, killer: execkill.Killer{Docker: docker, Proc: "/proc"},
		maxPortForwards: MaxPortForwardsPerSandbox, halfClosedIdle: HalfClosedIdleTimeout}
}

// stopContext returns a context that ends with ctx or when the server stops.
func (r *Runtime) stopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unregister := context.AfterFunc(r.base, cancel)
	return ctx, func() { unregister(); cancel() }
}

// ExitError is the error Exec returns for a command that exited non-zero: cri-streaming turns
// it into the NonZeroExitCode status that kubectl reports as "command terminated with exit
// code N" and exits with.
type ExitError = utilexec.CodeExitError

// Exec runs cmd in a running container through Docker's exec API, with the streams the client
// asked for (nil when not) and, with tty, resizes of the exec's terminal.
func (r *Runtime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) (err error) {
	defer recoverSession(r.log, "exec", &err)
	defer r.session("exec")()
	if len(cmd) == 0 || cmd[0] == "" {
		return errors.New("no command given")
	}
	ctx, cancel := r.stopContext(ctx)
	defer cancel()
	// The container's init process tells whether the exec needs a mark to be killable (a
	// sandboxed runtime: see package execkill).
	c, err := r.docker.InspectContainer(ctx, containerID)
	if err != nil {
		return containerError(err, containerID, "exec in")
	}
	opts := container.ExecOptions{
		Cmd:          cmd,
		Tty:          tty,
		AttachStdin:  in != nil,
		AttachStdout: out != nil,
		// A terminal has one output; Docker merges stderr into it.
		AttachStderr: errOut != nil && !tty,
	}
	mark := r.killer.Mark(c)
	if mark != "" {
		opts.Env = []string{mark}
	}
	execID, err := r.docker.CreateExec(ctx, c.ID, opts)
	if err != nil {
		return containerError(err, containerID, "exec in")
	}
	stream, err := r.docker.AttachExec(ctx, execID, container.ExecAttachOptions{Tty: tty})
	if err != nil {
		return fmt.Errorf("start exec in container %s: %w", containerID, err)
	}
	defer stream.Close()
	if tty {
		go r.resizeLoop(ctx, resize, func(ctx context.Context, h, w uint) error { return r.docker.ResizeExec(ctx, execID, h, w) })
	}
	if err := pipe(ctx, stream, in, out, errOut, tty); err != nil {
		r.killExec(ctx, c, execID, mark)
		return fmt.Errorf("exec in container %s: session ended before the command: %w", containerID, err)
	}
	code, err := r.exitCode(ctx, execID)
	if err != nil {
		return fmt.Errorf("exec in container %s: exit code: %w", containerID, err)
	}
	if code != 0 {
		return ExitError{Err: fmt.Errorf("command %q exited with %d", strings.Join(cmd, " "), code), Code: code}
	}
	return nil
}

// Attach connects the client to the stdio of a running container through Docker's attach API.
// The container's own TTY setting decides the framing of its output (Docker multiplexes only
// without a TTY) and whether resizes apply; stdin reaches only a container created with stdin.
func (r *Runtime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) (err error) {
	defer recoverSession(r.log, "attach", &err)
	defer r.session("attach")()
	ctx, cancel := r.stopContext(ctx)
	defer cancel()
	c, err := r.docker.InspectContainer(ctx, containerID)
	if err != nil {
		return containerError(err, containerID, "attach to")
	}
	if c.State == nil || !c.State.Running {
		return fmt.Errorf("attach to container %s: the container is not running", containerID)
	}
	if c.Config == nil || !c.Config.OpenStdin {
		in = nil
	}
	containerTTY := c.Config != nil && c.Config.Tty
	stream, err := r.docker.AttachContainer(ctx, c.ID, container.AttachOptions{
		Stream: true, Stdin: in != nil, Stdout: out != nil, Stderr: errOut != nil,
	})
	if err != nil {
		return containerError(err, containerID, "attach to")
	}
	defer stream.Close()
	if containerTTY {
		go r.resizeLoop(ctx, resize, func(ctx context.Context, h, w uint) error { return r.docker.ResizeContainer(ctx, c.ID, h, w) })
	}
	if err := pipe(ctx, stream, in, out, errOut, containerTTY); err != nil {
		return fmt.Errorf("attach to container %s: %w", containerID, err)
	}
	return nil
}

// containerError says what Docker's answer means for the container of a session.
func containerError(err error, id, doing string) error {
	switch {
	case libdocker.IsNotFound(err):
		return fmt.Errorf("%s container %s: the container does not exist: %w", doing, id, err)
	case libdocker.IsConflict(err):
		return fmt.Errorf("%s container %s: the container is not running: %w", doing, id, err)
	}
	return fmt.Errorf("%s container %s: %w", doing, id, err)
}

// pipe copies the client's stdin to Docker and Docker's output to the client until Docker ends
// the output (the process or container exited), a write to the client fails, or ctx ends.
// Closing stdin half-closes the Docker connection, which is how a process sees EOF.
func pipe(ctx context.Context, stream types.HijackedResponse, in io.Reader, out, errOut io.Writer, tty bool) error {
	if in != nil {
		// Ends when the client's stdin ends or its connection is closed (after the session).
		go func() {
			if _, err := io.Copy(stream.Conn, in); err == nil {
				_ = stream.CloseWrite()
			}
		}()
	}
	if out == nil {
		out = io.Discard
	}
	if errOut == nil {
		errOut = io.Discard
	}
	copied := make(chan error, 1)
	go func() {
		var err error
		if tty {
			_, err = io.Copy(out, stream.Reader)
		} else {
			_, err = stdcopy.StdCopy(out, errOut, stream.Reader)
		}
		copied <- err
	}()
	select {
	case err := <-copied:
		return err
	case <-ctx.Done():
		stream.Close()
		<-copied
		return ctx.Err()
	}
}

// resizeLoop applies the client's terminal sizes until the client stops sending them or ctx
// ends. A failed resize (the process just exited) is not worth ending the session for.
func (r *Runtime) resizeLoop(ctx context.Context, sizes <-chan remotecommand.TerminalSize, resize func(ctx context.Context, h, w uint) error) {
	if sizes == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case size, ok := <-sizes:
			if !ok {
				return
			}
			if size.Height == 0 && size.Width == 0 {
				continue
			}
			if err := resize(ctx, uint(size.Height), uint(size.Width)); err != nil && ctx.Err() == nil {
				r.log.Debugf("resize terminal to %dx%d: %v", size.Width, size.Height, err)
			}
		}
	}
}

// exitCode waits the moment Docker needs to record the exit after the output stream ended.
func (r *Runtime) exitCode(ctx context.Context, execID string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		inspect, err := r.docker.InspectExec(ctx, execID)
		if err != nil {
			return 0, err
		}
		if !inspect.Running {
			return inspect.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// killExec kills the process of a session that ended early, whatever the session's context.
func (r *Runtime) killExec(ctx context.Context, c *container.InspectResponse, execID, mark string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.killer.Kill(ctx, c, execID, mark); err != nil && !libdocker.IsNotFound(err) {
		r.log.WithField("exec", execID).Warnf("kill exec of an ended session: %v", err)
	}
}

// recoverSession turns a panic in a session into that session's error: net/http would recover
// it too, but without closing the session's Docker streams and with the stack in the wrong log.
func recoverSession(log *logrus.Entry, what string, err *error) {
	if p := recover(); p != nil {
		log.WithField("session", what).Errorf("panic: %v\n%s", p, debug.Stack())
		*err = fmt.Errorf("internal error in %s session: %v", what, p)
	}
}
