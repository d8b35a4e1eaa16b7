package streaming

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/execkill/execkilltest"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

func TestStopKillsTheProcessOfASessionInsideASandboxedRuntime(t *testing.T) {
	d := execkilltest.NewSandboxedDocker()
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
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return d.ExecRunning(id) != 0 }, "exec never started")
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
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if d.HostKills != 0 {
		t.Errorf("%d kills of Docker's exec PID, which is no process of a sandboxed container", d.HostKills)
	}
	if len(d.Killers) != 1 {
		t.Fatalf("%d kills inside the container, want 1", len(d.Killers))
	}
	for _, mark := range d.Killers {
		marked := 0
		for _, env := range d.Env {
			if len(env) == 1 && env[0] == mark && strings.HasPrefix(mark, "CRI_DOCKERD_EXEC=") {
				marked++
			}
		}
		if marked != 1 {
			t.Errorf("%d execs carry the mark %q, want the session's alone", marked, mark)
		}
	}
}
