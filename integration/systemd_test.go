//go:build integration

package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// activated is cri-dockerd run as cri-docker.service runs under systemd: the CRI socket passed
// as fd 3 (LISTEN_FDS, LISTEN_PID), --container-runtime-endpoint fd://, and a notify socket
// whose messages arrive on Notes.
type activated struct {
	cmd    *exec.Cmd
	Socket string
	Notes  chan string
	Done   chan error // the exit status, once it exited
	Client runtimeapi.RuntimeServiceClient
}

// startActivated starts cri-dockerd socket-activated on Docker at dockerHost; it is killed
// when the test ends, and its log printed if the test failed.
func startActivated(t *testing.T, dockerHost string) *activated {
	t.Helper()
	dir := t.TempDir()
	a := &activated{Socket: filepath.Join(dir, "cri.sock"), Notes: make(chan string, 10), Done: make(chan error, 1)}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: a.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	sockFile, err := lis.File()
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	defer sockFile.Close()

	notifyPath := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := notify.ReadFromUnix(buf)
			if err != nil {
				close(a.Notes)
				return
			}
			a.Notes <- string(buf[:n])
		}
	}()

	// LISTEN_PID must be the daemon's own pid: let a shell set it, then exec the binary.
	a.cmd = exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, suite.binary,
		"--container-runtime-endpoint", "fd://",
		"--cri-dockerd-root-directory", filepath.Join(dir, "root"),
		"--docker-endpoint", dockerHost,
		"--network-plugin", "none")
	a.cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "NOTIFY_SOCKET="+notifyPath)
	a.cmd.ExtraFiles = []*os.File{sockFile}
	logPath := filepath.Join(dir, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.Done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("cri-dockerd log:\n%s", log)
		}
	})
	conn, err := grpc.NewClient("unix://"+a.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a.Client = runtimeapi.NewRuntimeServiceClient(conn)
	return a
}

// awaitNote waits for a notification holding want, failing on an exit or after a while.
func (a *activated) awaitNote(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(testutil.Scaled(30 * time.Second))
	for {
		select {
		case msg := <-a.Notes:
			if strings.Contains(msg, want) {
				return
			}
		case err := <-a.Done:
			t.Fatalf("cri-dockerd exited before notifying %s: %v", want, err)
		case <-timeout:
			t.Fatalf("no %s notified", want)
		}
	}
}

// stop sends SIGTERM and expects STOPPING=1, then an exit 0; the socket, systemd's, stays.
func (a *activated) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.awaitNote(t, "STOPPING=1")
	select {
	case err := <-a.Done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(testutil.Scaled(15 * time.Second)):
		t.Fatal("no exit within 15 s of SIGTERM")
	}
	if _, err := os.Stat(a.Socket); err != nil {
		t.Errorf("activated socket removed at shutdown: %v", err)
	}
}

// TestSocketActivationAndNotify runs the binary as cri-docker.service does under systemd: the
// first notification is READY=1, once it serves, and STOPPING=1 comes when it shuts down.
func TestSocketActivationAndNotify(t *testing.T) {
	a := startActivated(t, suite.docker.DaemonHost())
	select {
	case msg := <-a.Notes:
		if !strings.Contains(msg, "READY=1") {
			t.Fatalf("first notification %q, want READY=1", msg)
		}
	case err := <-a.Done:
		t.Fatalf("cri-dockerd exited before READY=1: %v", err)
	case <-time.After(testutil.Scaled(30 * time.Second)):
		t.Fatal("no READY=1 within 30 s")
	}
	a.awaitNote(t, "STATUS=serving")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := a.Client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeName != "docker" {
		t.Fatalf("Version over the activated socket: %v, %v", v, err)
	}
	a.stop(t)
}

// TestMetricsAreOptInOnLoopback: no metrics listener unless asked; when asked, CRI calls,
// Docker operations and pods by handler are counted, and /debug/pprof is not found without
// --enable-pprof.
func TestMetricsAreOptInOnLoopback(t *testing.T) {
	d := StartDaemon(t, "--metrics-bind-addr", "127.0.0.1:0")
	podCfg := newPodConfig(t, "metrics")
	runPod(t, d, podCfg, "wrapped")
	addr := metricsAddr(t, d)
	for _, line := range strings.Split(d.readLog(), "\n") {
		if strings.Contains(line, `msg="metrics listening"`) && !strings.Contains(line, "pprof=false") ||
			strings.Contains(line, "not a loopback address") {
			t.Errorf("want the metrics listener logged with pprof=false and no warning on loopback: %s", line)
		}
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --enable-pprof: %s, want 404", resp.Status)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`cri_dockerd_cri_request_duration_seconds_count{method="RunPodSandbox"} 1`,
		`cri_dockerd_docker_operation_duration_seconds_count{operation="POST /containers/create"}`,
		`cri_dockerd_pod_sandboxes{runtime_handler="wrapped"} 1`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	plain := StartDaemon(t)
	if strings.Contains(plain.readLog(), "metrics listening") {
		t.Error("metrics listener started without --metrics-bind-addr")
	}
}
