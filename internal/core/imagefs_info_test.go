package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestImageFsInfoReportsImageAndContainerFilesystems(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	resp, err := s.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ImageFilesystems) != 1 || resp.ImageFilesystems[0].UsedBytes.GetValue() == 0 || resp.ImageFilesystems[0].FsId.Mountpoint == "" {
		t.Errorf("image filesystems %v", resp.ImageFilesystems)
	}
	if len(resp.ContainerFilesystems) != 1 {
		t.Errorf("container filesystems %v", resp.ContainerFilesystems)
	}
}

// With the containerd image store the layers live under containerd's snapshotter root, which
// containerd reports; their inodes are counted there, not the whole filesystem's.
func TestImageFsInfoOnTheContainerdStore(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetContainerdImageStore(true)
	s := newTestService(t, fake, Options{})
	snapshots := t.TempDir()
	for _, f := range []string{"1/fs/bin/sh", "1/fs/etc/passwd", "2/fs/app"} {
		p := filepath.Join(snapshots, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	s.layers.snapshotterRoot = func(_ context.Context, address, snapshotter string) (string, error) {
		asked = append(asked, address+" "+snapshotter)
		return snapshots, nil
	}
	resp, err := s.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	img := resp.ImageFilesystems[0]
	// snapshots/, 1, 1/fs, 1/fs/bin, sh, 1/fs/etc, passwd, 2, 2/fs, app
	if img.FsId.Mountpoint != snapshots || img.InodesUsed.GetValue() != 10 {
		t.Errorf("image filesystem %v; want containerd's snapshotter root %s with its 10 inodes", img, snapshots)
	}
	if len(asked) != 1 || !strings.HasSuffix(asked[0], " overlayfs") {
		t.Errorf("containerd asked %q, want once for the overlayfs snapshotter", asked)
	}
	if _, err := s.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{}); err != nil || len(asked) != 1 {
		t.Errorf("second call: %v; containerd asked %d times, want the root remembered", err, len(asked))
	}

	// Where containerd cannot be asked, Docker's root directory stands in, with a warning.
	fake2 := libdocker.NewFake()
	fake2.SetContainerdImageStore(true)
	s2 := newTestService(t, fake2, Options{})
	s2.layers.snapshotterRoot = func(context.Context, string, string) (string, error) { return "", errors.New("no containerd") }
	resp, err = s2.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := fake2.Info(context.Background())
	if resp.ImageFilesystems[0].FsId.Mountpoint != info.DockerRootDir {
		t.Errorf("without containerd: mountpoint %q, want Docker's root %q", resp.ImageFilesystems[0].FsId.Mountpoint, info.DockerRootDir)
	}
}
