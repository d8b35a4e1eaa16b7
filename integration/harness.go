//go:build integration

// Package integration tests the cri-dockerd binary against a real Docker engine: each test
// starts the binary on its own socket and root directory, talks CRI to it over gRPC, and checks
// what really happened with a Docker client of its own. See README.md.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// What the set-up scripts in hack/ prepare.
const (
	busyboxImage = "cri-dockerd-test/busybox:latest"
	pauseImage   = "registry.k8s.io/pause:3.10"
	wrapperLog   = "/var/log/cri-dockerd-test/runtime-wrapped.log"
	setupHint    = "run hack/docker.sh && hack/images.sh (as root)"
)

// suite is what TestMain prepares once: the binary under test and a Docker client for assertions.
var suite struct {
	binary string
	docker *client.Client
}

// Daemon is one cri-dockerd process under test, with CRI clients connected to its socket.
type Daemon struct {
	t       testing.TB
	Dir     string // holds the socket, the root directory and the log
	Socket  string
	LogPath string
	Args    []string // extra flags
	// Binary is the cri-dockerd to run: ours (suite.binary) unless a benchmark runs upstream's
	// (see upstream_test.go), whose SIGTERM exit status and socket removal are not checked.
	Binary string
	// ProcessGroup starts the daemon in a process group of its own, so that Kill can wait for
	// what it runs (CNI plugins) to finish after it is killed.
	ProcessGroup bool
	// DockerLater is for a Docker that is not up yet: Start waits only until the socket
	// answers Status (not ready), not Version.
	DockerLater bool

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process exited
	waitErr error
	conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
}

// NewDaemon prepares a daemon without starting it; its cleanup stops it (checking a clean
// exit), prints its log when the test failed and removes its directory.
func NewDaemon(t testing.TB, args ...string) *Daemon {
	t.Helper()
	// Not t.TempDir: socket paths must stay under 108 bytes whatever the test's name.
	dir, err := os.MkdirTemp("", "crid-it-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{t: t, Dir: dir, Socket: filepath.Join(dir, "cri.sock"), LogPath: filepath.Join(dir, "cri-dockerd.log"), Args: args}
	t.Cleanup(func() {
		if d.Running() {
			d.Stop()
		}
		if t.Failed() {
			d.dumpLog()
		}
		_ = os.RemoveAll(dir)
	})
	return d
}

// StartDaemon starts cri-dockerd with extra flags and waits until it answers Version (Docker
// reached, the service built).
func StartDaemon(t testing.TB, args ...string) *Daemon {
	t.Helper()
	d := NewDaemon(t, args...)
	d.Start()
	return d
}

// Running reports whether the process was started and has not exited.
func (d *Daemon) Running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Start starts the process (again) with the same socket, root directory and flags.
func (d *Daemon) Start() {
	d.t.Helper()
	logFile, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logFile.Close()
	args := append([]string{
		"--container-runtime-endpoint", "unix://" + d.Socket,
		"--cri-dockerd-root-directory", filepath.Join(d.Dir, "root"),
		"--docker-endpoint", suite.docker.DaemonHost(),
		"--log-level", "debug",
		// Docker's bridge unless a test asks for CNI: the node's /etc/cni/net.d is not the test's.
		"--network-plugin=",
	}, d.Args...)
	binary := suite.binary
	if d.Binary != "" {
		binary = d.Binary
	}
	fmt.Fprintf(logFile, "=== %s %s\n", binary, strings.Join(args, " "))
	d.cmd = exec.Command(binary, args...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if d.ProcessGroup {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start cri-dockerd: %v", err)
	}
	d.done = make(chan struct{})
	go func() { d.waitErr = d.cmd.Wait(); close(d.done) }()

	d.conn, err = grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatalf("grpc client: %v", err)
	}
	d.Runtime = runtimeapi.NewRuntimeServiceClient(d.conn)
	d.Images = runtimeapi.NewImageServiceClient(d.conn)

	if !testutil.PollUntil(30*time.Second, 20*time.Millisecond, func() bool {
		select {
		case <-d.done:
			d.t.Fatalf("cri-dockerd exited before serving (%v); log:\n%s", d.waitErr, d.readLog())
		default:
		}
		if _, err := os.Stat(d.Socket); err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if d.DockerLater {
			_, err = d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		} else {
			_, err = d.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
		}
		return err == nil
	}) {
		d.t.Fatalf("cri-dockerd did not answer on %s within 30 s; log:\n%s", d.Socket, d.readLog())
	}
}

// Stop sends SIGTERM and checks that the process exits 0 within 15 s and removes its socket.
func (d *Daemon) Stop() {
	d.t.Helper()
	if d.conn != nil {
		_ = d.conn.Close()
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		d.t.Errorf("SIGTERM: %v", err)
	}
	select {
	case <-d.done:
	case <-time.After(testutil.Scaled(15 * time.Second)):
		_ = d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("cri-dockerd did not exit within 15 s of SIGTERM")
	}
	if d.Binary != "" {
		return
	}
	if d.waitErr != nil {
		d.t.Errorf("cri-dockerd exited with %v after SIGTERM, want exit status 0", d.waitErr)
	}
	if _, err := os.Lstat(d.Socket); !errors.Is(err, os.ErrNotExist) {
		d.t.Errorf("socket %s still there after shutdown (stat: %v)", d.Socket, err)
	}
}

// Restart stops the daemon cleanly and starts it again on the same socket and root directory.
func (d *Daemon) Restart() {
	d.t.Helper()
	d.Stop()
	d.Start()
}

func (d *Daemon) readLog() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// logLines counts the lines of the daemon's log that hold fragment.
func (d *Daemon) logLines(fragment string) int { return strings.Count(d.readLog(), fragment) }

// awaitLogLines waits until the log holds more than before lines with fragment: the daemon
// logged that it saw what the test did.
func (d *Daemon) awaitLogLines(before int, fragment string) {
	d.t.Helper()
	testutil.Eventually(d.t, 30*time.Second, 10*time.Millisecond, func() bool { return d.logLines(fragment) > before },
		"cri-dockerd did not log %q", fragment)
}

// peakRSS is the daemon's peak resident set (VmHWM), in bytes.
func (d *Daemon) peakRSS() int64 {
	d.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		d.t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	d.t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

func (d *Daemon) dumpLog() {
	d.t.Logf("cri-dockerd log (%s):\n%s", d.LogPath, d.readLog())
}

// randHex is a short random suffix that keeps names unique across runs and parallel suites.
func randHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newPodConfig is a kubelet-like sandbox config with a unique name and namespace. The pod's
// Docker containers are removed when the test ends, pass or fail, whatever cri-dockerd did.
func newPodConfig(t testing.TB, prefix string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	suffix := randHex()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: prefix + "-" + suffix, Namespace: "crid-it-" + suffix, Uid: "uid-" + suffix,
		},
		// Exists, as the kubelet creates it before it runs the sandbox.
		LogDirectory: t.TempDir(),
		Labels:       map[string]string{"crid-it-pod": prefix + "-" + suffix},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	t.Cleanup(func() { removePodContainers(t, cfg.Metadata) })
	return cfg
}

// podNameFilter matches the Docker names of every container of a pod (k8s_*_NAME_NS_UID_*).
func podNameFilter(m *runtimeapi.PodSandboxMetadata) filters.Args {
	return filters.NewArgs(filters.Arg("name", "_"+m.Name+"_"+m.Namespace+"_"+m.Uid+"_"))
}

// podContainers lists the Docker containers of a pod, in any state.
func podContainers(t testing.TB, m *runtimeapi.PodSandboxMetadata) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: podNameFilter(m)})
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return list
}

func removePodContainers(t testing.TB, m *runtimeapi.PodSandboxMetadata) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: podNameFilter(m)})
	if err != nil {
		t.Errorf("cleanup: docker ps: %v", err)
		return
	}
	for _, c := range list {
		if err := suite.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
			t.Errorf("cleanup: remove container %s: %v", c.ID, err)
		}
	}
}

// runPod runs a sandbox with the given RuntimeClass handler and fails the test on error.
func runPod(t testing.TB, d *Daemon, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	resp, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox(handler %q): %v", handler, err)
	}
	return resp.PodSandboxId
}

// sleeper runs until SIGTERM and then exits at once (a plain `sleep` as PID 1 ignores SIGTERM
// and would make every stop wait for its timeout).
const sleeper = `trap "exit 0" TERM; sleep 1000 & wait`

// containerConfig is a busybox container running a shell command, in its own PID namespace as
// the kubelet asks by default.
func containerConfig(name, script string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:  []string{"sh", "-c", script},
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// createContainer creates a container in a sandbox and fails the test on error.
func createContainer(t testing.TB, d *Daemon, sandboxID string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	resp, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer %q: %v", cfg.Metadata.Name, err)
	}
	return resp.ContainerId
}

func startContainer(t testing.TB, d *Daemon, id string) {
	t.Helper()
	if _, err := d.Runtime.StartContainer(t.Context(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer %s: %v", id, err)
	}
}

// dockerRuntime is the HostConfig.Runtime Docker recorded for a container.
func dockerRuntime(t testing.TB, id string) string {
	t.Helper()
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return c.HostConfig.Runtime
}

// wrapperCreated reports whether the "wrapped" runtime logged a `create` of container id.
func wrapperCreated(t testing.TB, id string) bool {
	t.Helper()
	b, err := os.ReadFile(wrapperLog)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " create ") && strings.HasSuffix(line, " "+id) {
			return true
		}
	}
	return false
}

// wantCode checks a gRPC error's code and that its message holds every fragment.
func wantCode(t testing.TB, err error, code codes.Code, fragments ...string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Errorf("got code %v (err %v), want %v", got, err, code)
		return
	}
	msg := status.Convert(err).Message()
	for _, f := range fragments {
		if !strings.Contains(msg, f) {
			t.Errorf("error message %q does not mention %q", msg, f)
		}
	}
}
