//go:build integration

package integration

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func wantSocketMode(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("%s has mode %v, want a socket with 0660", path, fi.Mode())
	}
}

func TestSocketIsGroupOnlyAndStaleSocketIsReplaced(t *testing.T) {
	d := NewDaemon(t)
	// A socket file nobody listens on, as a crash leaves behind.
	l, err := net.Listen("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Lstat(d.Socket); err != nil {
		t.Fatalf("stale socket not left in place: %v", err)
	}
	d.Start()
	wantSocketMode(t, d.Socket)

	// A live socket is not taken over: a second daemon on it must fail and leave it alone.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, suite.binary, "--container-runtime-endpoint", "unix://"+d.Socket,
		"--cri-dockerd-root-directory", d.Dir+"/root2").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use") {
		t.Errorf("second daemon on a live socket: %v, output %q; want a failure saying the socket is in use", err, out)
	}
	if _, err := d.Runtime.Version(t.Context(), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("first daemon no longer answers after the second one gave up: %v", err)
	}
}

func TestSIGTERMShutsDownCleanlyAndLeavesPodsRunning(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "shutdown")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	startContainer(t, d, ctrID)
	d.Stop() // checks exit status 0 within 15 s and that the socket is gone
	for _, id := range []string{sandboxID, ctrID} {
		c, err := suite.docker.ContainerInspect(t.Context(), id)
		if err != nil || !c.State.Running {
			t.Errorf("container %.12s after cri-dockerd stopped: %v; want it still running", id, err)
		}
	}
}
