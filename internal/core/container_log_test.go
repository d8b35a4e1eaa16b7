package core

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// The CRI log of a container with and without a TTY holds what it wrote, line by line: Docker
// sends a TTY's output raw, not in stdout/stderr frames.
func TestContainerLogIsWrittenWithAndWithoutTTY(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	podCfg.LogDirectory = t.TempDir()
	for _, tty := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "tty"}[tty]
		if err := os.MkdirAll(filepath.Join(podCfg.LogDirectory, name), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := containerConfig(name)
		cfg.Tty = tty
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.ContainerId
		if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		if err := fake.WriteLog(id, false, "hello\nworld\n"); err != nil {
			t.Fatal(err)
		}
		if err := fake.ExitContainer(id, 0); err != nil {
			t.Fatal(err)
		}
		// The status of an exited container waits for its last lines.
		st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(st.Status.LogPath)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
		if len(lines) != 2 || !strings.HasSuffix(lines[0], " stdout F hello") || !strings.HasSuffix(lines[1], " stdout F world") {
			t.Errorf("%s container's log:\n%s\nwant the lines hello and world on stdout", name, raw)
		}
	}
}
