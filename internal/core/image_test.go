package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/registry"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

func TestImageIdentifiersAgreeAcrossAPIs(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("example.com/app:1", libdocker.FakeImage("", "1002", "example.com/app:1"))
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	auth := &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: "example.com"}
	pulled, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:1"}, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.LastPullAuth(); got != (registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "example.com"}) {
		t.Errorf("auth reaching Docker: %+v", got)
	}
	st, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:1"}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus = %v, %v", st, err)
	}
	if st.Image.Id != pulled.ImageRef || st.Image.Uid.GetValue() != 1002 || st.Image.Username != "" {
		t.Errorf("image %v, pulled ref %q", st.Image, pulled.ImageRef)
	}
	podID, podCfg := runPod(t, s, "p", "")
	cfg := containerConfig("c")
	cfg.Image = &runtimeapi.ImageSpec{Image: pulled.ImageRef, UserSpecifiedImage: "example.com/app:1"}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: resp.ContainerId})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status.ImageId != pulled.ImageRef || cs.Status.Image.Image != "example.com/app:1" {
		t.Errorf("container image_id %q image %q", cs.Status.ImageId, cs.Status.Image.Image)
	}
	list, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: resp.ContainerId}})
	if len(list.Containers) != 1 || list.Containers[0].ImageId != pulled.ImageRef {
		t.Errorf("listed container %v", list.Containers)
	}
}

func TestImageUserFields(t *testing.T) {
	fake := libdocker.NewFake()
	for _, tc := range []struct {
		user     string
		uid      int64
		username string
	}{{"1002", 1002, ""}, {"www-data", 0, "www-data"}, {"1003:1003", 1003, ""}, {"www-data:staff", 0, "www-data"}} {
		fake.AddImage(libdocker.FakeImage("", tc.user, "u/"+tc.username+tc.user[:1]+":x"))
		s := newTestService(t, fake, Options{})
		st, err := s.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "u/" + tc.username + tc.user[:1] + ":x"}})
		if err != nil || st.Image == nil {
			t.Fatalf("%s: %v %v", tc.user, st, err)
		}
		if st.Image.Uid.GetValue() != tc.uid || st.Image.Username != tc.username {
			t.Errorf("USER %q: uid %v username %q", tc.user, st.Image.Uid, st.Image.Username)
		}
	}
}

func TestRemoveImageByOneTagRemovesAllTagsAndConcurrentRemovalsSucceed(t *testing.T) {
	fake := libdocker.NewFake()
	id := fake.AddImage(libdocker.FakeImage("", "", "a/img:1", "a/img:2", "b/img:3"))
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "a/img:1"}})
			if err == nil {
				if st, _ := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: id}}); st.GetImage() != nil {
					err = context.DeadlineExceeded // image still visible after a successful removal
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent RemoveImage: %v", err)
		}
	}
	for _, ref := range []string{"a/img:2", "b/img:3", id} {
		if st, _ := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); st.GetImage() != nil {
			t.Errorf("%s still present", ref)
		}
	}
}

func TestPullImageHonoursRequestContext(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("slow/img:1", libdocker.FakeImage("", "", "slow/img:1"))
	fake.SetPullDelay(10 * time.Second)
	s := newTestService(t, fake, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "slow/img:1"}})
	wantCode(t, err, codes.DeadlineExceeded)
	if time.Since(start) > 5*time.Second {
		t.Errorf("pull returned after %s, not when the request's deadline passed", time.Since(start))
	}
}

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

// The pod infra image is pinned (the kubelet's image garbage collection keeps it); no other
// image is.
func TestOnlyThePauseImageIsPinned(t *testing.T) {
	s := newTestService(t, libdocker.NewFake(), Options{})
	list, err := s.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, img := range list.Images {
		for _, tag := range img.RepoTags {
			pinned[tag] = img.Pinned
		}
	}
	if len(pinned) != 2 || !pinned[testPauseImage] || pinned[testImage] {
		t.Errorf("pinned by tag %v, want %s alone of %s and %s", pinned, testPauseImage, testPauseImage, testImage)
	}
}

// PullImage and RemoveImage fail when Docker does: an image the registry does not have, an
// image Docker cannot remove.
func TestPullAndRemoveImageFailWhenDockerFails(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	if resp, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/missing:1"}}); err == nil {
		t.Errorf("PullImage of an image the registry lacks = %v, want an error", resp)
	}
	id := fake.AddImage(libdocker.FakeImage("", "")) // untagged: removed by its ID alone
	fake.InjectError("RemoveImage", errors.New("unrecognized image ID"))
	if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err == nil {
		t.Error("RemoveImage succeeded although Docker failed to remove the image")
	}
	if resp, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err != nil || resp == nil {
		t.Errorf("RemoveImage = %v, %v; want it removed", resp, err)
	}
	if _, err := fake.InspectImage(ctx, id); !libdocker.IsNotFound(err) {
		t.Errorf("the image is still there (%v)", err)
	}
}

// The inode count of a layers directory is taken again once it is older than its age: a count
// of a directory that grew is followed by the new count.
func TestInodeCountIsTakenAgainWhenOld(t *testing.T) {
	s := newTestService(t, libdocker.NewFake(), Options{})
	l := s.layers
	l.countsAge = 20 * time.Millisecond
	dir := t.TempDir()
	ctx := context.Background()
	first, ok := l.inodes(ctx, dir)
	if !ok {
		t.Fatal("no first count")
	}
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Asked less often than the age: each call finds the last count old.
	var n uint64
	if !testutil.PollUntil(5*time.Second, 0, func() bool {
		time.Sleep(3 * l.countsAge)
		n, _ = l.inodes(ctx, dir)
		return n == first+2
	}) {
		t.Fatalf("count %d, want %d once the first count is old", n, first+2)
	}
}
