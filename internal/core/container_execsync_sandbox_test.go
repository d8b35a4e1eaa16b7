package core

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/execkill/execkilltest"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// newSandboxedService is newTestService on d, with one started container; the container's init
// process is in the procfs fixture at the given PID namespace levels (1: a runtime's host process,
// as gVisor's runsc-sandbox; 2: the container's own, as with runc).
func newSandboxedService(t *testing.T, d *execkilltest.SandboxedDocker, levels int) (*Service, string) {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	d.SetDockerRootDir(t.TempDir())
	d.AddImage(libdocker.FakeImage("", "", testPauseImage))
	d.AddImage(libdocker.FakeImage("", "", testImage))
	d.SetExecHandler(func(_ string, cmd []string) libdocker.ExecResult {
		if cmd[0] == "sleep" {
			return libdocker.ExecResult{Delay: time.Minute}
		}
		return libdocker.ExecResult{}
	})
	s, err := New(context.Background(), d, Options{PodInfraImage: testPauseImage, DefaultRuntimeHandler: "docker", Logger: logger})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.layers.snapshotterRoot = func(context.Context, string, string) (string, error) { return "", errors.New("no containerd") }
	s.layers.upperDir = func(context.Context, string, string, string, string) (string, error) {
		return "", errors.New("no containerd")
	}
	useStats(s, stats.Config{Host: stats.NewHost(t.TempDir(), t.TempDir())})
	t.Cleanup(s.Close)

	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	if _, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	c, err := d.InspectContainer(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	proc := s.stats.Host().Proc()
	dir := filepath.Join(proc, strconv.Itoa(c.State.Pid))
	for _, p := range []string{filepath.Join(dir, "ns"), filepath.Join(proc, "self", "ns")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nspid := strconv.Itoa(c.State.Pid)
	if levels > 1 {
		nspid += "\t1"
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte("NSpid:\t"+nspid+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mnt:[2]", filepath.Join(dir, "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mnt:[1]", filepath.Join(proc, "self", "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	return s, id
}

func newSandboxedDocker() *execkilltest.SandboxedDocker {
	return execkilltest.NewSandboxedDocker()
}

func TestExecSyncTimeoutKillsTheProcessInsideASandboxedRuntime(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	d := newSandboxedDocker()
	s, id := newSandboxedService(t, d, 1)
	start := time.Now()
	_, err := s.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "4321"}, Timeout: 1})
	wantCode(t, err, codes.DeadlineExceeded)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("a timeout of 1 s returned after %s", elapsed)
	}
	if n := d.ExecRunning(id); n != 0 {
		t.Errorf("%d timed-out exec'd processes still run in the sandbox", n)
	}
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if d.HostKills != 0 {
		t.Errorf("%d kills of Docker's exec PID, which is no process of a sandboxed container", d.HostKills)
	}
	var marks []string
	for execID, env := range d.Env {
		if _, killer := d.Killers[execID]; !killer {
			marks = append(marks, env...)
		}
	}
	if len(marks) != 1 || !regexp.MustCompile(`^CRI_DOCKERD_EXEC=[0-9a-f]{32}$`).MatchString(marks[0]) {
		t.Fatalf("the timed-out exec's environment %q, want one CRI_DOCKERD_EXEC mark", marks)
	}
	if len(d.Killers) != 1 {
		t.Fatalf("%d kills inside the container, want 1", len(d.Killers))
	}
	for execID, mark := range d.Killers {
		if mark != marks[0] || len(d.Env[execID]) != 0 {
			t.Errorf("the kill inside the container looked for %q with environment %q, want %q and none", mark, d.Env[execID], marks[0])
		}
	}
}

func TestExecSyncOnRuncNeitherMarksNorKillsInside(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	d := newSandboxedDocker()
	s, id := newSandboxedService(t, d, 2)
	if _, err := s.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := s.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "4321"}, Timeout: 1})
	wantCode(t, err, codes.DeadlineExceeded)
	if n := d.ExecRunning(id); n != 0 {
		t.Errorf("%d timed-out exec'd processes still run", n)
	}
	d.Mu.Lock()
	defer d.Mu.Unlock()
	for execID, env := range d.Env {
		if len(env) != 0 {
			t.Errorf("exec %s of a runc container got environment %q", execID, env)
		}
	}
	if d.HostKills != 1 || len(d.Killers) != 0 {
		t.Errorf("%d host kills and %d kills inside, want the host kill alone", d.HostKills, len(d.Killers))
	}
}

func TestExecSyncCancelledWithoutTimeoutKillsInsideASandboxedRuntime(t *testing.T) {
	t.Parallel()
	d := newSandboxedDocker()
	s, id := newSandboxedService(t, d, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // the caller goes away
	defer cancel()
	if _, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "4321"}}); err == nil {
		t.Fatal("ExecSync of a caller that went away succeeded")
	}
	if n := d.ExecRunning(id); n != 0 {
		t.Errorf("%d exec'd processes of a caller that went away still run in the sandbox", n)
	}
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if d.HostKills != 0 || len(d.Killers) != 1 {
		t.Errorf("%d host kills and %d kills inside, want one kill inside", d.HostKills, len(d.Killers))
	}
}
