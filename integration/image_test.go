//go:build integration

package integration

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPullUnreachableImageFailsClearly(t *testing.T) {
	d := StartDaemon(t)
	ref := "127.0.0.1:1/nope:1"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := d.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err == nil {
		t.Fatalf("PullImage(%s) succeeded", ref)
	}
	t.Logf("PullImage: %v", err)
	// Names the image and says why (nothing listens on port 1).
	msg := status.Convert(err).Message()
	if code := status.Code(err); code == codes.OK || code == codes.Internal || !strings.Contains(msg, ref) || !strings.Contains(msg, "connection refused") {
		t.Errorf("PullImage error %v: want a message naming %s and the cause (connection refused)", err, ref)
	}
	if ctx.Err() != nil {
		t.Errorf("PullImage of an unreachable registry ran into the test's deadline")
	}
}

func TestImageStatusOfMissingImageIsEmpty(t *testing.T) {
	d := StartDaemon(t)
	resp, err := d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "cri-dockerd-test/missing-" + randHex() + ":1"}})
	if err != nil || resp.Image != nil {
		t.Errorf("ImageStatus of a missing image = %v, %v; want no image and no error", resp, err)
	}
}

func TestImageFsInfoReportsUsage(t *testing.T) {
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t)
	resp, err := d.Images.ImageFsInfo(t.Context(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ImageFilesystems) != 1 {
		t.Fatalf("image filesystems: %v, want one", resp.ImageFilesystems)
	}
	fs := resp.ImageFilesystems[0]
	// The classic store keeps layers under Docker's root; the containerd store (Docker 29's
	// default) under containerd's snapshotter root, which containerd reports.
	want := info.DockerRootDir
	for _, kv := range info.DriverStatus {
		if kv[0] == "driver-type" && kv[1] == "io.containerd.snapshotter.v1" {
			want = "io.containerd.snapshotter.v1." + info.Driver
		}
	}
	if fs.GetUsedBytes().GetValue() == 0 || !strings.HasSuffix(fs.GetFsId().GetMountpoint(), want) || fs.Timestamp == 0 {
		t.Errorf("image filesystem = %v; want used bytes > 0, mountpoint %s, a timestamp", fs, want)
	}
	if _, err := os.Stat(fs.GetFsId().GetMountpoint()); err != nil {
		t.Errorf("image filesystem mountpoint: %v", err)
	}
	// The layers' own inodes, not the whole filesystem's.
	var st syscall.Statfs_t
	if err := syscall.Statfs(fs.GetFsId().GetMountpoint(), &st); err != nil {
		t.Fatal(err)
	}
	if used := fs.GetInodesUsed().GetValue(); used == 0 || used >= st.Files-st.Ffree {
		t.Errorf("image filesystem inodes used %d; want the layers' own, fewer than the filesystem's %d", used, st.Files-st.Ffree)
	}
}

// distinctImage commits a busybox container with a unique label: an image with its own ID and
// two tags, removed at the end of the test if still there.
func distinctImage(t *testing.T) (id string, tags []string) {
	t.Helper()
	ctx := t.Context()
	suffix := randHex()
	tags = []string{"cri-dockerd-test/remove-me-" + suffix + ":1", "cri-dockerd-test/remove-me-" + suffix + ":2"}
	c, err := suite.docker.ContainerCreate(ctx, &container.Config{Image: busyboxImage, Cmd: []string{"true"}}, nil, nil, nil, "crid-it-commit-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer suite.docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	committed, err := suite.docker.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: tags[0], Changes: []string{"LABEL crid-it=" + suffix}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = suite.docker.ImageRemove(context.Background(), committed.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	if err := suite.docker.ImageTag(ctx, tags[0], tags[1]); err != nil {
		t.Fatal(err)
	}
	return committed.ID, tags
}

func TestRemoveImageRemovesAllTagsConcurrently(t *testing.T) {
	d := StartDaemon(t)
	busybox, err := suite.docker.ImageInspect(t.Context(), busyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	id, tags := distinctImage(t)
	st, err := d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tags[0]}})
	if err != nil || st.Image == nil || st.Image.Id != id || !sameIDs(st.Image.RepoTags, tags) {
		t.Fatalf("ImageStatus(%s) = %v, %v; want id %s and tags %v", tags[0], st, err, id, tags)
	}

	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = d.Images.RemoveImage(t.Context(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: tags[0]}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent RemoveImage #%d: %v", i, err)
		}
	}
	if _, err := suite.docker.ImageInspect(t.Context(), id); !client.IsErrNotFound(err) {
		t.Errorf("image %s still there after RemoveImage (inspect: %v)", id, err)
	}
	for _, tag := range tags {
		if st, err := d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tag}}); err != nil || st.Image != nil {
			t.Errorf("ImageStatus(%s) after removal = %v, %v; want no image", tag, st, err)
		}
	}
	if after, err := suite.docker.ImageInspect(t.Context(), busyboxImage); err != nil || after.ID != busybox.ID {
		t.Errorf("the parent image %s was touched: %v", busyboxImage, err)
	}
	// Removing it once more is still a success.
	if _, err := d.Images.RemoveImage(t.Context(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err != nil {
		t.Errorf("RemoveImage of a removed image: %v", err)
	}
}
