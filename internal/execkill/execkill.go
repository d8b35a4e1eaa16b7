// Package execkill kills a process that Docker exec'd in a container, also when the container
// runs on a sandboxed runtime (gVisor, a VM) where that process is no host process at all.
//
// Docker has no API to kill an exec'd process. What it reports is the host PID of the exec: with
// runc, crun or youki that is the process itself, in the container's namespaces, and a signal to
// it is the kill. With gVisor it is `runsc exec`, a host process that waits for the process in the
// sandbox: killing it ends Docker's exec (exit 137) and leaves the process running in the sandbox
// (runsc forwards no signal of a non-TTY exec, and none can forward SIGKILL). With a shim that
// reports a PID from inside a VM, the host PID names an unrelated host process.
//
// So a process is killed on the host only when its host PID is verifiably a process of the
// container (it is in the container's mount namespace). An exec in a container whose processes
// are not host processes carries an environment variable with a token of its own (Mark), and is
// killed from inside the container by a second exec that sends SIGKILL to every process whose
// environment holds the token: the process and what it started. That needs sh and grep in the
// image, as most have; without them the process is reported as still running.
package execkill

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// EnvName is the variable that marks an exec'd process of a sandboxed container.
const EnvName = "CRI_DOCKERD_EXEC"

// defaultExitWait bounds the wait for Docker to see a process killed inside the container end
// (runsc exec returns once the sandbox reports the exit).
const defaultExitWait = 5 * time.Second

// killScript sends SIGKILL to the processes whose environment holds $1. The token is the
// script's argument, so it is in the killer's command line, never in its environment. grep -a
// because environ is NUL-separated; no -F: BusyBox's fixed-string match stops at the first NUL,
// and the mark (letters, digits, _ and =) means itself as a pattern.
const killScript = `command -v grep >/dev/null || { echo "no grep in the image" >&2; exit 127; }; for f in $(grep -a -l "$1" /proc/[0-9]*/environ 2>/dev/null); do p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null; done; exit 0`

// Killer kills exec'd processes through Docker and the host's procfs.
type Killer struct {
	Docker libdocker.Client
	// Proc is the host's procfs: "/proc", a fixture directory in tests.
	Proc string
	// ExitWait bounds the wait for an exec killed inside its container to end (default 5 s).
	ExitWait time.Duration
}

// Mark returns the environment entry ("CRI_DOCKERD_EXEC=TOKEN") that an exec in container c
// needs to be killable, or "" when c's processes are host processes: its init process is in a
// PID namespace of its own, as with runc, or the host's procfs does not show it (then Kill does
// what it always did). A container on the host's PID namespace is marked too: the mark is
// harmless there, and Kill still kills such a process on the host.
func (k Killer) Mark(c *container.InspectResponse) string {
	if c == nil || c.State == nil || c.State.Pid <= 0 {
		return ""
	}
	levels, ok := k.pidNamespaceLevels(c.State.Pid)
	if !ok || levels != 1 {
		return ""
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	return EnvName + "=" + hex.EncodeToString(b[:])
}

// pidNamespaceLevels is the number of PID namespaces process pid is in (the NSpid line of its
// status: 1 for a process of the host's namespace).
func (k Killer) pidNamespaceLevels(pid int) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(k.Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			n := len(strings.Fields(rest))
			return n, n > 0
		}
	}
	return 0, false
}

// Kill kills the running process of exec execID in container c, which was created with mark
// (from Mark). It returns once Docker reports the exec ended, or an error that says why not.
func (k Killer) Kill(ctx context.Context, c *container.InspectResponse, execID, mark string) error {
	inspect, err := k.Docker.InspectExec(ctx, execID)
	if err != nil {
		return err
	}
	if !inspect.Running {
		return nil
	}
	initPid := 0
	if c != nil && c.State != nil {
		initPid = c.State.Pid
	}
	same, known := k.sameMountNamespace(initPid, inspect.Pid)
	switch {
	case same, !known && mark == "":
		// The process itself (runc), or a host whose procfs shows neither: as before.
		return k.Docker.KillExec(ctx, execID)
	case mark == "":
		return fmt.Errorf("exec process %d is not in the container's mount namespace: not killing a host process that may not be the exec's", inspect.Pid)
	}
	out, err := k.killInside(ctx, c.ID, mark)
	if err != nil {
		return fmt.Errorf("kill the exec's process inside the container: %w", err)
	}
	code, err := exitCode(ctx, k.Docker, out.execID)
	if err != nil {
		return fmt.Errorf("kill the exec's process inside the container: %w", err)
	}
	if code != 0 {
		// No shell or grep in the image (126, 127): nothing was killed, no need to wait.
		return fmt.Errorf("the exec's process still runs inside the container: the kill needs sh and grep in the image, and exited %d: %s", code, brief(out.text))
	}
	wait := k.ExitWait
	if wait <= 0 {
		wait = defaultExitWait
	}
	if err := waitEnded(ctx, k.Docker, execID, wait); err != nil {
		if msg := brief(out.text); msg != "" {
			err = fmt.Errorf("%w (the killer said: %s)", err, msg)
		}
		return fmt.Errorf("the exec's process still runs inside the container (the kill needs sh and grep in the image): %w", err)
	}
	return nil
}

// sameMountNamespace reports whether process pid is in the mount namespace of the container's
// init process initPid, one that is not ours; known is false when the procfs shows either not.
func (k Killer) sameMountNamespace(initPid, pid int) (same, known bool) {
	if initPid <= 0 || pid <= 0 {
		return false, false
	}
	ns := func(p string) (string, error) { return os.Readlink(filepath.Join(k.Proc, p, "ns", "mnt")) }
	container, err := ns(strconv.Itoa(initPid))
	if err != nil {
		return false, false
	}
	process, err := ns(strconv.Itoa(pid))
	if err != nil {
		return false, false
	}
	self, err := ns("self")
	return process == container && (err != nil || container != self), true
}

// killerRun is an exec of killScript: its ID and what it printed.
type killerRun struct{ execID, text string }

// killInside runs killScript in the container until it ends.
func (k Killer) killInside(ctx context.Context, containerID, mark string) (killerRun, error) {
	token := strings.TrimPrefix(mark, EnvName+"=")
	execID, err := k.Docker.CreateExec(ctx, containerID, container.ExecOptions{
		Cmd:          []string{"sh", "-c", killScript, "sh", EnvName + "=" + token},
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return killerRun{}, err
	}
	stream, err := k.Docker.AttachExec(ctx, execID, container.ExecAttachOptions{})
	if err != nil {
		return killerRun{execID: execID}, err
	}
	defer stream.Close()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&out, &out, io.LimitReader(stream.Reader, 64<<10))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, io.EOF) {
			return killerRun{execID, out.String()}, err
		}
	case <-ctx.Done():
		stream.Close()
		<-done
		return killerRun{execID, out.String()}, ctx.Err()
	}
	return killerRun{execID, out.String()}, nil
}

// waitEnded waits until Docker reports exec execID ended, at most wait.
func waitEnded(ctx context.Context, docker libdocker.Client, execID string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		inspect, err := docker.InspectExec(ctx, execID)
		if err != nil {
			return err
		}
		if !inspect.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("exec still running after %s", wait)
		case <-time.After(delay):
		}
	}
}

// exitCode is the exit code of exec execID, once Docker has recorded it (just after its output
// ended).
func exitCode(ctx context.Context, docker libdocker.Client, execID string) (int, error) {
	if err := waitEnded(ctx, docker, execID, defaultExitWait); err != nil {
		return -1, err
	}
	inspect, err := docker.InspectExec(ctx, execID)
	if err != nil {
		return -1, err
	}
	return inspect.ExitCode, nil
}

// brief is the first line of a killer's output, at most 200 bytes: Docker's error for a missing
// sh repeats the whole script.
func brief(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}
