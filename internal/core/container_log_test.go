package core

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
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

func TestLogPathOfConfinesARecordedDirectory(t *testing.T) {
	const dir = "/var/log/pods/ns_p_uid"
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string // "refused" for an error
	}{
		{"inside", map[string]string{containerLogPathLabel: dir + "/c/0.log", logDirectoryLabel: dir}, dir + "/c/0.log"},
		{"no log path", map[string]string{containerLogPathLabel: "", logDirectoryLabel: ""}, ""},
		{"outside", map[string]string{containerLogPathLabel: "/etc/cron.d/x", logDirectoryLabel: dir}, "refused"},
		{"climbing out", map[string]string{containerLogPathLabel: dir + "/../other/0.log", logDirectoryLabel: dir}, "refused"},
		{"a sibling sharing the prefix", map[string]string{containerLogPathLabel: dir + "x/0.log", logDirectoryLabel: dir}, "refused"},
		{"the directory itself", map[string]string{containerLogPathLabel: dir, logDirectoryLabel: dir}, "refused"},
		{"a path without a directory", map[string]string{containerLogPathLabel: "/tmp/x.log", logDirectoryLabel: ""}, "refused"},
		{"a relative directory", map[string]string{containerLogPathLabel: "/tmp/x.log", logDirectoryLabel: "."}, "refused"},
		// Made before the directory was recorded: the path as it is.
		{"no directory label", map[string]string{containerLogPathLabel: "/tmp/x.log"}, "/tmp/x.log"},
	} {
		got, err := logPathOf(tc.labels)
		if err != nil {
			got = "refused"
		}
		if got != tc.want {
			t.Errorf("%s: got %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
}

// A container whose labels record the pod's log directory gets no log written outside it, and
// reports none; one made before the directory was recorded keeps the path its labels give.
func TestLogPathOutsideTheRecordedDirectoryIsNotFollowed(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	logged := warnings(s)
	podID, podCfg := runPod(t, s, "p", "")
	elsewhere := t.TempDir()
	create := func(name string, labels map[string]string) string {
		t.Helper()
		labels[containerTypeLabel] = containerTypeContainer
		labels[sandboxIDLabel] = podID
		labels[logLabel] = logCRI
		id, err := fake.CreateContainer(ctx, "k8s_"+name+"_p_ns_uid-p_0", &container.Config{Image: testImage, Cmd: []string{"sleep", "1"}, Labels: labels}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	escaped := filepath.Join(elsewhere, "escaped.log")
	escapedID := create("escaped", map[string]string{containerLogPathLabel: escaped, logDirectoryLabel: podCfg.LogDirectory})
	older := filepath.Join(elsewhere, "older.log")
	olderID := create("older", map[string]string{containerLogPathLabel: older})

	for range 2 { // the second start finds it running: no second warning
		if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: escapedID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(escaped); !os.IsNotExist(err) {
		t.Errorf("log path outside the pod's log directory: %v; want no file", err)
	}
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: escapedID})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.LogPath != "" {
		t.Errorf("ContainerStatus log path %q, want none", st.Status.LogPath)
	}
	var refused []string
	for _, w := range logged() {
		if strings.Contains(w, escapedID) && strings.Contains(w, escaped) {
			refused = append(refused, w)
		}
	}
	if len(refused) != 1 {
		t.Errorf("warnings naming the container and its path: %q, want one", refused)
	}

	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: olderID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(older); err != nil {
		t.Errorf("the log of a container without the directory label: %v", err)
	}
	if st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: olderID}); err != nil || st.Status.LogPath != older {
		t.Errorf("ContainerStatus of a container without the directory label: %v, log path %q, want %q", err, st.GetStatus().GetLogPath(), older)
	}
}
