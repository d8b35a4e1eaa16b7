package streaming

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

// sandboxedDocker is the fake Docker of a runtime like gVisor: a host kill (KillExec) of an
// exec only counts, and an exec of `sh -c SCRIPT sh MARK` kills the execs whose environment
// holds MARK, as package execkill's script does inside the sandbox.
type sandboxedDocker struct {
	*libdocker.Fake

	mu        sync.Mutex
	env       map[string][]string
	killers   map[string]string
	hostKills int
}

func (d *sandboxedDocker) CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error) {
	execID, err := d.Fake.CreateExec(ctx, id, opts)
	if err == nil {
		d.mu.Lock()
		d.env[execID] = opts.Env
		if len(opts.Cmd) == 5 && opts.Cmd[0] == "sh" && opts.Cmd[1] == "-c" {
			d.killers[execID] = opts.Cmd[4]
		}
		d.mu.Unlock()
	}
	return execID, err
}

func (d *sandboxedDocker) AttachExec(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	d.mu.Lock()
	var targets []string
	if mark, ok := d.killers[execID]; ok {
		for id, env := range d.env {
			for _, e := range env {
				if e == mark {
					targets = append(targets, id)
				}
			}
		}
	}
	d.mu.Unlock()
	for _, id := range targets {
		if err := d.Fake.KillExec(ctx, id); err != nil {
			return types.HijackedResponse{}, err
		}
	}
	return d.Fake.AttachExec(ctx, execID, opts)
}

func (d *sandboxedDocker) KillExec(ctx context.Context, execID string) error {
	d.mu.Lock()
	d.hostKills++
	d.mu.Unlock()
	return d.Fake.KillExec(ctx, execID)
}

func TestStopKillsTheProcessOfASessionInsideASandboxedRuntime(t *testing.T) {
	d := &sandboxedDocker{Fake: libdocker.NewFake(), env: map[string][]string{}, killers: map[string]string{}}
	id := runningContainer(t, d.Fake, nil)
	d.SetExecHandler(func(_ string, cmd []string) libdocker.ExecResult {
		if cmd[0] == "sleep" {
			return libdocker.ExecResult{Delay: time.Hour}
		}
		return libdocker.ExecResult{}
	})
	// The container's init is a host process in the host's PID namespace (runsc-sandbox).
	c, err := d.InspectContainer(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	dir := filepath.Join(proc, strconv.Itoa(c.State.Pid))
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte("NSpid:\t"+strconv.Itoa(c.State.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mnt:[2]", filepath.Join(dir, "ns", "mnt")); err != nil {
		t.Fatal(err)
	}

	s, err := NewServer(Options{Docker: d, Logger: quietLog(), Proc: proc})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sleep", "4321"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- spdyExec(t.Context(), resp.Url, remotecommand.StreamOptions{Stdout: io.Discard}) }()
	for deadline := time.Now().Add(5 * time.Second); d.ExecRunning(id) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("exec never started")
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("session still running after Stop")
	}
	if n := d.ExecRunning(id); n != 0 {
		t.Errorf("%d exec'd processes still run in the sandbox after Stop", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hostKills != 0 {
		t.Errorf("%d kills of Docker's exec PID, which is no process of a sandboxed container", d.hostKills)
	}
	if len(d.killers) != 1 {
		t.Fatalf("%d kills inside the container, want 1", len(d.killers))
	}
	for _, mark := range d.killers {
		marked := 0
		for _, env := range d.env {
			if len(env) == 1 && env[0] == mark && strings.HasPrefix(mark, "CRI_DOCKERD_EXEC=") {
				marked++
			}
		}
		if marked != 1 {
			t.Errorf("%d execs carry the mark %q, want the session's alone", marked, mark)
		}
	}
}
