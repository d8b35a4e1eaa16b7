package core

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/execkill"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// maxExecOutput caps what ExecSync buffers of both streams together: the kubelet's probes need
// little, a runaway command must not exhaust our memory, and the reply must stay under the
// 16 MiB gRPC message limit (less room for the reply's framing), or the command's result is
// lost with it.
const maxExecOutput = 16<<20 - 64<<10

// ExecSync runs a command in a running container and returns its output and exit code. When the
// timeout expires the process is killed, not left running as upstream cri-dockerd leaves it,
// also inside a sandboxed runtime such as gVisor, where Docker's exec PID is no process of the
// container (see package execkill: such an exec carries a mark to be found by).
func (s *Service) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return nil, invalidf("cmd is required")
	}
	if req.Timeout < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	c, err := s.inspectCRIContainer(ctx, id) // only in a CRI container: never exec into a container we did not create
	if err != nil {
		return nil, err
	}
	opts := container.ExecOptions{Cmd: req.Cmd, AttachStdout: true, AttachStderr: true}
	// Also without a timeout: a caller that goes away has the process killed too.
	mark := s.execKiller().Mark(c)
	if mark != "" {
		opts.Env = []string{mark}
	}
	execID, err := s.docker.CreateExec(ctx, c.ID, opts)
	if err != nil {
		switch {
		case libdocker.IsNotFound(err):
			return nil, notFoundf("container %q not found", id)
		case libdocker.IsConflict(err):
			return nil, status.Errorf(codes.FailedPrecondition, "exec in container %q: the container is not running", id)
		}
		return nil, dockerError(err, "exec in container %q", id)
	}

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if req.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, time.Duration(boundedSeconds(req.Timeout))*time.Second)
	}
	defer cancel()
	stream, err := s.docker.AttachExec(runCtx, execID, container.ExecAttachOptions{})
	if err != nil {
		return nil, dockerError(err, "start exec in container %q", id)
	}
	defer stream.Close()

	room := maxExecOutput
	stdout, stderr := cappedBuffer{room: &room}, cappedBuffer{room: &room}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&stdout, &stderr, stream.Reader)
		copied <- err
	}()
	select {
	case err := <-copied:
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, dockerError(err, "read exec output of container %q", id)
		}
	case <-runCtx.Done():
		stream.Close()
		killErr := s.killExec(ctx, c, execID, mark)
		if ctx.Err() != nil {
			return nil, dockerError(ctx.Err(), "exec in container %q", id)
		}
		if killErr != nil {
			return nil, status.Errorf(codes.DeadlineExceeded, "exec in container %q: command %q timed out after %ds; killing it failed: %v", id, req.Cmd, req.Timeout, killErr)
		}
		return nil, status.Errorf(codes.DeadlineExceeded, "exec in container %q: command %q timed out after %ds and was killed", id, req.Cmd, req.Timeout)
	}
	exitCode, err := s.execExitCode(ctx, execID)
	if err != nil {
		return nil, dockerError(err, "inspect exec in container %q", id)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: exitCode}, nil
}

// execExitCode waits the moment Docker needs to record the exit after the output stream ends.
func (s *Service) execExitCode(ctx context.Context, execID string) (int32, error) {
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		inspect, err := s.docker.InspectExec(ctx, execID)
		if err != nil {
			return 0, err
		}
		if !inspect.Running {
			return int32(inspect.ExitCode), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// killExec kills a timed-out exec'd process, whatever the caller's context; a failure is
// logged and returned.
func (s *Service) killExec(ctx context.Context, c *container.InspectResponse, execID, mark string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := s.execKiller().Kill(ctx, c, execID, mark)
	if err != nil {
		s.log.WithField("exec", execID).WithField("container", c.ID).Warnf("kill timed-out exec: %v", err)
	}
	return err
}

// execKiller kills exec'd processes with the host's procfs the stats see (a fixture in tests).
func (s *Service) execKiller() execkill.Killer {
	return execkill.Killer{Docker: s.docker, Proc: s.stats.Host().Proc()}
}

// cappedBuffer keeps what it is written while room, which the buffers of one exec share (one
// goroutine writes both), lasts, and drops the rest: the output is cut, the call does not fail.
type cappedBuffer struct {
	bytes.Buffer
	room *int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if n := min(len(p), *b.room); n > 0 {
		b.Buffer.Write(p[:n])
		*b.room -= n
	}
	return len(p), nil
}
