package core

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// checkpointNode is a service whose Docker can checkpoint (when experimental and criu), with
// a kubelet checkpoint directory and a host /proc in which container id's process has a
// containerd shim for parent, running in a bundle with config.json.
func checkpointNode(t *testing.T, experimental, criu bool) (s *Service, fake *libdocker.Fake, dir string, start func(name string) string) {
	t.Helper()
	fake = libdocker.NewFake()
	fake.SetCheckpoints(experimental, true)
	dir = filepath.Join(t.TempDir(), "checkpoints")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s = newTestService(t, fake, Options{CheckpointDirectory: dir, RootDirectory: t.TempDir()})
	t.Cleanup(s.Close)
	old := lookCriu
	lookCriu = func() error {
		if !criu {
			return errors.New(`exec: "criu": executable file not found in $PATH`)
		}
		return nil
	}
	t.Cleanup(func() { lookCriu = old })
	proc, bundle := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.0.2","process":{"args":["sleep"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	useStats(s, stats.Config{Host: stats.NewHost(t.TempDir(), proc)})
	podID, podCfg := runPod(t, s, "cp", "")
	start = func(name string) string {
		t.Helper()
		pid := strconv.Itoa(fake.NextPid())
		for p, stat := range map[string]string{pid: pid + " (sleep) S 7 1 1 0", "7": "7 (containerd-shim) S 1 7 7 0"} {
			if err := os.MkdirAll(filepath.Join(proc, p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(proc, p, "stat"), []byte(stat), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_ = os.Symlink(bundle, filepath.Join(proc, "7", "cwd"))
		return startedContainer(t, s, podID, podCfg, name)
	}
	return s, fake, dir, start
}

func TestCheckpointContainerWritesTheKubeletsArchive(t *testing.T) {
	s, fake, dir, start := checkpointNode(t, true, true)
	ctx := context.Background()
	id := start("app")
	location := filepath.Join(dir, "checkpoint-cp_ns-app-2026-12-03T17:00:00Z.tar")
	if _, err := s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id[:12], Location: location, Timeout: 30}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(location)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	var config string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "config.dump" {
			b, _ := io.ReadAll(tr)
			config = string(b)
		}
	}
	for _, want := range []string{"config.dump", "spec.dump", "checkpoint/inventory.img", "checkpoint/pages-1.img"} {
		if !slices.Contains(names, want) {
			t.Errorf("archive lacks %s: %v", want, names)
		}
	}
	if !strings.Contains(config, `"id": "`+id+`"`) || !strings.Contains(config, `"name": "app"`) {
		t.Errorf("config.dump %s", config)
	}
	if c, _ := fake.InspectContainer(ctx, id); !c.State.Running {
		t.Error("the container stopped: a checkpoint leaves it running")
	}
	// Docker's work directory is gone; the same location again is refused.
	if left, _ := os.ReadDir(filepath.Join(s.opts.RootDirectory, "checkpoint-work")); len(left) != 0 {
		t.Errorf("left in the work directory: %v", left)
	}
	_, err = s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location})
	wantCode(t, err, codes.AlreadyExists)
}

func TestCheckpointContainerRefusals(t *testing.T) {
	ctx := context.Background()
	s, fake, dir, start := checkpointNode(t, true, true)
	id := start("app")
	outside := t.TempDir()
	link := filepath.Join(outside, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, location string
		code           codes.Code
	}{
		{"relative", "checkpoint.tar", codes.InvalidArgument},
		{"another directory", filepath.Join(outside, "c.tar"), codes.InvalidArgument},
		{"a subdirectory", filepath.Join(dir, "sub", "c.tar"), codes.InvalidArgument},
		{"dot-dot", dir + "/../c.tar", codes.InvalidArgument},
		{"the directory itself", dir, codes.InvalidArgument},
		{"empty", "", codes.InvalidArgument},
	} {
		_, err := s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: tc.location})
		if status.Code(err) != tc.code {
			t.Errorf("%s (%q): %v, want %v", tc.name, tc.location, err, tc.code)
		}
	}
	if n := fake.Calls("CheckpointContainer"); n != 0 {
		t.Errorf("%d Docker checkpoints for refused locations", n)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("written outside the checkpoint directory: %v", entries)
	}
	// A checkpoint directory behind a symlink is refused too.
	s.opts.CheckpointDirectory = link
	_, err := s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(link, "c.tar")})
	wantCodeSaying(t, err, codes.FailedPrecondition, "symlink")
	s.opts.CheckpointDirectory = dir

	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "c.tar")})
	wantCodeSaying(t, err, codes.FailedPrecondition, "not running")
	_, err = s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: "nosuch", Location: filepath.Join(dir, "c.tar")})
	wantCode(t, err, codes.NotFound)
}

// Without Docker's checkpoints: Unimplemented, saying what the node lacks, before Docker is asked.
func TestCheckpointContainerUnimplementedSaysWhatIsNeeded(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name               string
		experimental, criu bool
		says               string
	}{
		{"Docker not experimental", false, true, `"experimental": true`},
		{"no CRIU", true, false, "apt install criu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fake, dir, start := checkpointNode(t, tc.experimental, tc.criu)
			id := start("app")
			_, err := s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "c.tar")})
			wantCodeSaying(t, err, codes.Unimplemented, tc.says)
			if n := fake.Calls("CheckpointContainer"); n != 0 {
				t.Errorf("%d Docker checkpoints", n)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left in the checkpoint directory: %v", entries)
			}
		})
	}
}

// wantCodeSaying checks a gRPC error's code and that its message holds says.
func wantCodeSaying(t *testing.T, err error, code codes.Code, says string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
		t.Errorf("%v, want %v saying %q", err, code, says)
	}
}
