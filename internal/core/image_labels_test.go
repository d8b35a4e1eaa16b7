package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker copies every label of an image whose key the container's config lacks into the
// container's labels. An image may use our keys: what they say must change nothing we do or
// report. The keys are written out as an image author would write them.

// withLabels is img with labels in its config.
func withLabels(img image.InspectResponse, labels map[string]string) image.InspectResponse {
	img.Config.Labels = labels
	return img
}

// imageVolumeRecord is an image volume record that mounts image id under key.
func imageVolumeRecord(key, img, id string) string {
	return fmt.Sprintf(`{"v":1,"key":%q,"mounts":[{"containerPath":"/mnt","image":%q,"imageId":%q,"index":0}]}`, key, img, id)
}

// wantNoImageKeys fails when CRI labels or annotations show a key of the image's.
func wantNoImageKeys(t *testing.T, what string, labels, annotations, imageLabels map[string]string) {
	t.Helper()
	for k := range imageLabels {
		if _, ok := labels[k]; ok {
			t.Errorf("%s: CRI labels show the image's %s", what, k)
		}
		if _, ok := annotations[strings.TrimPrefix(k, annotationPrefix)]; ok {
			t.Errorf("%s: CRI annotations show the image's %s", what, k)
		}
	}
}

func TestImageLabelsUnderOurKeysChangeNothingForAContainer(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	// "../../evil" from ROOT/image-volumes is base/evil.
	root := filepath.Join(base, "state", "cri-dockerd")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	evilLogDir := filepath.Join(base, "elsewhere")
	if err := os.MkdirAll(evilLogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	evilLog := filepath.Join(evilLogDir, "out.log")

	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.41") // our own mounts, not Docker's: a key becomes a directory
	mounter := newFakeMounter()
	volumeID := fake.AddImage(overlayImage(t, volumeImage))
	const evilImage = "evil.example/app:1"
	imageLabels := map[string]string{
		"io.cri-dockerd.user-image":       "evil.example/backdoor:latest",
		"io.kubernetes.container.logpath": evilLog,
		"io.cri-dockerd.log":              "cri",
		"io.cri-dockerd.log-directory":    evilLogDir,
		"io.cri-dockerd.cgroup-v2":        `{"memory.high":"4096"}`,
		"io.cri-dockerd.image-volumes":    imageVolumeRecord("../../evil", volumeImage, volumeID),
		"io.cri-dockerd.runtime-handler":  "evil",
		"io.cri-dockerd.docker-runtime":   "evil-runc",
		"io.cri-dockerd.cri-keys":         `["evil.label","annotation.evil"]`,
		"evil.label":                      "x",
		"annotation.evil":                 "x",
	}
	fake.AddImage(withLabels(libdocker.FakeImage("", "", evilImage), imageLabels))
	opts := Options{RootDirectory: root, imageVolumeMounter: mounter}
	s := newTestService(t, fake, opts)
	t.Cleanup(s.Close)
	layOut := cgroupV2Node(t, s, fake)
	podID, podCfg := runPod(t, s, "p", "")

	cfg := containerConfig("c")
	cfg.Image = &runtimeapi.ImageSpec{Image: evilImage}
	cfg.LogPath = "" // a client that asks for no log file
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	cgroup := layOut(id)
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if got := readCgroupFile(t, cgroup, "memory.high"); got != "max" {
		t.Errorf("memory.high = %q after the start, want the kernel's max: the image's cgroup file map was written", got)
	}
	if _, err := os.Stat(evilLog); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the image's log path %s: %v; want no file", evilLog, err)
	}
	if n := s.LogFollowers(); n != 0 {
		t.Errorf("%d log followers for a container without log_path", n)
	}

	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Status.Image.GetImage(); got != evilImage {
		t.Errorf("ContainerStatus image %q, want the request's %q", got, evilImage)
	}
	if st.Status.LogPath != "" {
		t.Errorf("ContainerStatus log path %q, want none", st.Status.LogPath)
	}
	for _, m := range st.Status.Mounts {
		if m.Image != nil {
			t.Errorf("ContainerStatus reports an image volume at %q", m.ContainerPath)
		}
	}
	wantNoImageKeys(t, "ContainerStatus", st.Status.Labels, st.Status.Annotations, imageLabels)
	list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Containers {
		wantNoImageKeys(t, "ListContainers", c.Labels, c.Annotations, imageLabels)
	}

	// A restart rebuilds the image volume index from the labels, and a start after it mounts
	// what the index holds.
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	s2 := newTestService(t, fake, opts)
	t.Cleanup(s2.Close)
	if _, err := s2.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Errorf("StartContainer after the restart: %v", err)
	}
	if n := mounter.count(); n != 0 {
		t.Errorf("%d image volume mounts, want none", n)
	}
	if _, err := os.Stat(filepath.Join(base, "state", "evil")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the image's key made a directory outside ROOT/image-volumes: %v", err)
	}
	if _, err := os.Stat(evilLog); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after the restart, the image's log path %s: %v; want no file", evilLog, err)
	}
	if _, err := s2.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage of the image the image's record names, after the restart: %v", err)
	}
}

// The pod infra image is the node's, but its labels reach the sandbox the same way.
func TestImageLabelsUnderOurKeysChangeNothingForASandbox(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	volumeID := fake.AddImage(overlayImage(t, volumeImage))
	// A key such as ours: only the label's reservation keeps it out.
	imageLabels := map[string]string{
		"io.cri-dockerd.image-volumes": imageVolumeRecord("0123456789abcdef01234567", volumeImage, volumeID),
		"io.kubernetes.sandbox.id":     "another-pod",
		"io.cri-dockerd.user-image":    "evil.example/backdoor:latest",
		"evil.label":                   "x",
	}
	fake.AddImage(withLabels(libdocker.FakeImage("", "", testPauseImage), imageLabels))
	fake.AddImage(libdocker.FakeImage("", "", testImage))
	opts := Options{RootDirectory: t.TempDir(), imageVolumeMounter: newFakeMounter()}
	s := newTestService(t, fake, opts)
	t.Cleanup(s.Close)
	podID, _ := runPod(t, s, "p", "")
	st, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	wantNoImageKeys(t, "PodSandboxStatus", st.Status.Labels, st.Status.Annotations, imageLabels)
	c, err := fake.InspectContainer(ctx, podID)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config.Labels[sandboxIDLabel]; got != "" {
		t.Errorf("the sandbox carries sandbox ID label %q from its image", got)
	}

	s2 := newTestService(t, fake, opts)
	t.Cleanup(s2.Close)
	if _, err := s2.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage of the image the pause image's record names, after a restart: %v", err)
	}
}
