package core

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

const (
	testPauseImage = "registry.k8s.io/pause:3.10"
	testImage      = "busybox:1.36"
)

// newTestService builds a Service on a fake Docker that has the pause and busybox images.
func newTestService(t testing.TB, fake *libdocker.Fake, opts Options) *Service {
	t.Helper()
	return newTestServiceOn(t, fake, fake, opts)
}

// newTestServiceOn is newTestService whose Docker client is docker in front of fake (a test
// double; a container store goes in opts.Store).
func newTestServiceOn(t testing.TB, fake *libdocker.Fake, docker libdocker.Client, opts Options) *Service {
	t.Helper()
	if opts.PodInfraImage == "" {
		opts.PodInfraImage = testPauseImage
	}
	if opts.DefaultRuntimeHandler == "" {
		opts.DefaultRuntimeHandler = "docker"
	}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	opts.Logger = logger
	// Docker's root directory is the test's own: ImageFsInfo and the fs metrics read it.
	fake.SetDockerRootDir(t.TempDir())
	if _, err := fake.InspectImage(context.Background(), testPauseImage); err != nil {
		fake.AddImage(libdocker.FakeImage("", "", testPauseImage))
		fake.AddImage(libdocker.FakeImage("", "", testImage))
	}
	s, err := New(context.Background(), docker, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// No containerd is asked in unit tests (the fake's /info names the host's socket).
	s.layers.snapshotterRoot = func(context.Context, string, string) (string, error) {
		return "", errors.New("no containerd in unit tests")
	}
	s.layers.upperDir = func(context.Context, string, string, string, string) (string, error) {
		return "", errors.New("no containerd in unit tests")
	}
	// The fake's containers have pids of the host's processes: never read the host's /proc and
	// cgroups for them (a test that needs those points host at fixtures).
	useStats(s, stats.Config{Host: stats.NewHost(t.TempDir(), t.TempDir())})
	s.adoptions.readIPs = func(string) ([]string, error) { return nil, errors.New("no network namespaces in unit tests") }
	// A mount's missing host path is created for real, inside the test's directories only.
	s.hostDirMaker = func(path string) error {
		if !strings.HasPrefix(path, os.TempDir()+string(filepath.Separator)) {
			t.Errorf("a unit test would create host path %q outside %s", path, os.TempDir())
			return errors.New("unit tests create host paths only in temporary directories")
		}
		return mkdirHostPath(path)
	}
	return s
}

// useStats replaces s's stats collector by one on cfg, which keeps the current collector's host
// unless it names one.
func useStats(s *Service, cfg stats.Config) {
	if cfg.Host == (stats.Host{}) {
		cfg.Host = s.stats.Host()
	}
	s.stats.Close()
	s.stats = s.newStats(cfg)
}

// testLogRoot holds the kubelet-like log directories of sandboxConfig: unit tests never write
// the host's /var/log/pods.
var testLogRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crid-core-test-logs-")
	if err != nil {
		panic(err)
	}
	testLogRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sandboxConfig is a kubelet-like sandbox config; its log directory exists, as the kubelet
// creates it before it runs the sandbox.
func sandboxConfig(name string) *runtimeapi.PodSandboxConfig {
	logDir := filepath.Join(testLogRoot, "ns_"+name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		panic(err)
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: "uid-" + name, Attempt: 1},
		Labels:       map[string]string{"app": name, "io.kubernetes.pod.name": name},
		Annotations:  map[string]string{"note": "x", "kubernetes.io/config.seen": "2026-11-30"},
		LogDirectory: logDir,
	}
}

func containerConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name, Attempt: 2},
		Image:       &runtimeapi.ImageSpec{Image: testImage},
		Command:     []string{"sleep", "1000"},
		Labels:      map[string]string{"io.kubernetes.container.name": name, "tier": "web"},
		Annotations: map[string]string{"a": "b"},
		LogPath:     name + "/0.log",
	}
}

func runPod(t testing.TB, s *Service, name, handler string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := sandboxConfig(name)
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox(%q): %v", handler, err)
	}
	return resp.PodSandboxId, cfg
}

func createContainer(t testing.TB, s *Service, podID string, podCfg *runtimeapi.PodSandboxConfig, name string) string {
	t.Helper()
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig(name), SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return resp.ContainerId
}

func dockerRuntimeOf(t *testing.T, fake *libdocker.Fake, id string) string {
	t.Helper()
	c, err := fake.InspectContainer(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return c.HostConfig.Runtime
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v (code %v), want code %v", err, status.Code(err), code)
	}
}

// The metrics' hooks reach the background work: StatsRefreshed hears of the refresh a stats
// call made, LogWriteFailed is the log manager's, and LogFollowers counts the follower of a
// started container's log.
func TestMetricsHooksReachStatsAndLogs(t *testing.T) {
	fake := libdocker.NewFake()
	refreshes := make(chan bool, 10)
	writeFailures := 0
	s := newTestService(t, fake, Options{
		StatsRefreshed: func(_ time.Duration, failed bool) { refreshes <- failed },
		LogWriteFailed: func() { writeFailures++ },
	})
	t.Cleanup(s.Close)
	if s.logs.WriteFailed == nil {
		t.Fatal("the log manager has no WriteFailed")
	}
	if s.logs.WriteFailed(); writeFailures != 1 {
		t.Errorf("the log manager's WriteFailed is not Options.LogWriteFailed")
	}
	if n := s.LogFollowers(); n != 0 {
		t.Fatalf("%d log followers before any container", n)
	}
	podID, podCfg := runPod(t, s, "hooks", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	if n := s.LogFollowers(); n != 1 {
		t.Errorf("%d log followers with one running container, want 1", n)
	}
	if _, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case failed := <-refreshes:
		if failed {
			t.Error("the refresh of a running container's stats was reported failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StatsRefreshed heard of no refresh")
	}
}
