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
)

// TestSocketActivationAndNotify runs the binary as cri-docker.service does under systemd: the
// CRI socket passed as fd 3 (LISTEN_FDS, LISTEN_PID), --container-runtime-endpoint fd://, and
// a notify socket that must hear READY=1 once it serves and STOPPING=1 when it shuts down.
func TestSocketActivationAndNotify(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "cri.sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
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
	defer notify.Close()
	messages := make(chan string, 10)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := notify.ReadFromUnix(buf)
			if err != nil {
				close(messages)
				return
			}
			messages <- string(buf[:n])
		}
	}()

	// LISTEN_PID must be the daemon's own pid: let a shell set it, then exec the binary.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, suite.binary,
		"--container-runtime-endpoint", "fd://",
		"--cri-dockerd-root-directory", filepath.Join(dir, "root"),
		"--docker-endpoint", suite.docker.DaemonHost(),
		"--network-plugin", "none")
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "NOTIFY_SOCKET="+notifyPath)
	cmd.ExtraFiles = []*os.File{sockFile}
	logPath := filepath.Join(dir, "log")
	logFile, _ := os.Create(logPath)
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("cri-dockerd log:\n%s", log)
		}
	}()

	select {
	case msg := <-messages:
		if !strings.Contains(msg, "READY=1") {
			t.Fatalf("first notification %q, want READY=1", msg)
		}
	case err := <-done:
		t.Fatalf("cri-dockerd exited before READY=1: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no READY=1 within 30 s")
	}
	conn, err := grpc.NewClient("unix://"+sockPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeName != "docker" {
		t.Fatalf("Version over the activated socket: %v, %v", v, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-messages:
		if !strings.Contains(msg, "STOPPING=1") {
			t.Errorf("notification at shutdown %q, want STOPPING=1", msg)
		}
	case <-time.After(15 * time.Second):
		t.Error("no STOPPING=1 within 15 s of SIGTERM")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15 s of SIGTERM")
	}
	// The socket belongs to systemd: it stays.
	if _, err := os.Stat(sockPath); err != nil {
		t.Errorf("activated socket removed at shutdown: %v", err)
	}
}

// TestMetricsAreOptInOnLoopback: no metrics listener unless asked; when asked, CRI calls,
// Docker operations and pods by handler are counted.
func TestMetricsAreOptInOnLoopback(t *testing.T) {
	d := StartDaemon(t, "--metrics-bind-addr", "127.0.0.1:0")
	podCfg := newPodConfig(t, "metrics")
	runPod(t, d, podCfg, "wrapped")
	addr := ""
	for _, line := range strings.Split(d.readLog(), "\n") {
		if i := strings.Index(line, "metrics and pprof listening"); i >= 0 {
			if j := strings.Index(line, "address="); j >= 0 {
				addr = strings.Trim(strings.Fields(line[j+len("address="):])[0], `"`)
			}
		}
	}
	if addr == "" || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("metrics address %q not found in the log", addr)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
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
	if strings.Contains(plain.readLog(), "metrics and pprof listening") {
		t.Error("metrics listener started without --metrics-bind-addr")
	}
}
