package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
)

// The CRI RPCs of containers with image volumes (internal/imagevolume mounts them).

// fakeMounter "mounts" by copying the layers' files into the target (lowest layer first), so
// that sub paths resolve on a real tree, and records what is mounted where.
type fakeMounter struct {
	mu         sync.Mutex
	mounted    map[string][]string // target -> layers
	mounts     int
	unmountErr error // what unmount fails with, while set
}

func newFakeMounter() *fakeMounter { return &fakeMounter{mounted: map[string][]string{}} }

func (m *fakeMounter) MountLayers(target string, layers []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mounted[target]; ok {
		return errors.New("fakeMounter: already mounted")
	}
	for i := len(layers) - 1; i >= 0; i-- {
		if err := os.CopyFS(target, os.DirFS(layers[i])); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	m.mounted[target] = slices.Clone(layers)
	m.mounts++
	return nil
}

func (m *fakeMounter) Unmount(target string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unmountErr != nil {
		return m.unmountErr
	}
	if _, ok := m.mounted[target]; !ok {
		return nil
	}
	delete(m.mounted, target)
	entries, _ := os.ReadDir(target)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(target, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (m *fakeMounter) MountPointsUnder(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.mounted {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

func (m *fakeMounter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mounted)
}

// overlayImage is an image on overlay2 with two layer directories: the lower one has bin/sh and
// etc/passwd, the upper one etc/group, a symlink inside the image and one leading out of it.
func overlayImage(t *testing.T, tag string) image.InspectResponse {
	t.Helper()
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower", "diff"), filepath.Join(dir, "upper", "diff")
	for path, content := range map[string]string{
		filepath.Join(lower, "bin", "sh"):      "#!",
		filepath.Join(lower, "etc", "passwd"):  "root:x:0:0::/root:/bin/sh\n",
		filepath.Join(upper, "etc", "group"):   "root:x:0:\n",
		filepath.Join(upper, "data", "x.conf"): "x",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"config": "/etc", "escape": "../../..", "nested": "data/../../x"} {
		if err := os.Symlink(target, filepath.Join(upper, link)); err != nil {
			t.Fatal(err)
		}
	}
	img := libdocker.FakeImage("", "", tag)
	img.GraphDriver.Name = "overlay2"
	img.GraphDriver.Data = map[string]string{"UpperDir": upper, "LowerDir": lower}
	return img
}

type imageVolumeEnv struct {
	fake    *libdocker.Fake
	mounter *fakeMounter
	root    string
	s       *Service
	podID   string
	podCfg  *runtimeapi.PodSandboxConfig
	imageID string
}

const volumeImage = "example.com/content:1"

func newImageVolumeEnv(t *testing.T, apiVersion string) *imageVolumeEnv {
	t.Helper()
	e := &imageVolumeEnv{fake: libdocker.NewFake(), mounter: newFakeMounter(), root: t.TempDir()}
	if apiVersion != "" {
		e.fake.SetAPIVersion(apiVersion)
	}
	e.imageID = e.fake.AddImage(overlayImage(t, volumeImage))
	e.s = newTestService(t, e.fake, Options{RootDirectory: e.root, imageVolumeMounter: e.mounter})
	t.Cleanup(e.s.Close)
	e.podID, e.podCfg = runPod(t, e.s, "p", "")
	return e
}

func imageVolumeConfig(name string, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	cfg := containerConfig(name)
	cfg.Mounts = mounts
	return cfg
}

func imageMount(path, img, sub string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: path, Readonly: true, Image: &runtimeapi.ImageSpec{Image: img, UserSpecifiedImage: "content:1"}, ImageSubPath: sub}
}

func (e *imageVolumeEnv) create(cfg *runtimeapi.ContainerConfig) (string, error) {
	resp, err := e.s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: e.podID, Config: cfg, SandboxConfig: e.podCfg})
	return resp.GetContainerId(), err
}

// leftovers lists what is under ROOT/image-volumes.
func (e *imageVolumeEnv) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	dir := filepath.Join(e.root, imagevolume.Dir)
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

func (e *imageVolumeEnv) containers(t *testing.T) int {
	t.Helper()
	n := 0
	for _, c := range e.fake.Containers() {
		if c.Config.Labels[containerTypeLabel] == containerTypeContainer {
			n++
		}
	}
	return n
}

func TestImageVolumeOverlayMountReportAndRemove(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	data := t.TempDir()
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c",
		imageMount("/mnt/all", e.imageID, ""),
		imageMount("/mnt/etc", volumeImage, "etc/"),
		imageMount("/mnt/cfg", volumeImage, "config"),
		&runtimeapi.Mount{ContainerPath: "/data", HostPath: data}))
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if e.mounter.count() != 3 {
		t.Fatalf("%d mounts, want 3", e.mounter.count())
	}
	c, _ := e.fake.InspectContainer(ctx, id)
	if len(c.HostConfig.Binds) != 0 || len(c.HostConfig.Mounts) != 4 {
		t.Fatalf("docker binds %q mounts %+v, want the host path's mount and 3 of image volumes", c.HostConfig.Binds, c.HostConfig.Mounts)
	}
	if m := c.HostConfig.Mounts[0]; m.Type != mount.TypeBind || m.Source != data || m.Target != "/data" {
		t.Errorf("docker mount 0 = %+v, want the host path's", m)
	}
	var key string
	for i, want := range []struct{ target, sub string }{{"/mnt/all", ""}, {"/mnt/etc", "etc"}, {"/mnt/cfg", "etc"}} {
		m := c.HostConfig.Mounts[i+1]
		if key == "" {
			key = filepath.Base(filepath.Dir(m.Source))
		}
		src := filepath.Join(e.root, imagevolume.Dir, key, string(rune('0'+i)), want.sub)
		if m.Type != mount.TypeBind || m.Source != src || m.Target != want.target || !m.ReadOnly || m.BindOptions == nil || m.BindOptions.Propagation != mount.PropagationRPrivate {
			t.Errorf("docker mount %d = %+v, want a read-only rprivate bind of %s on %s", i, m, src, want.target)
		}
	}
	img, _ := e.fake.InspectImage(ctx, volumeImage)
	dir0 := filepath.Join(e.root, imagevolume.Dir, key, "0")
	if got := e.mounter.mounted[dir0]; !slices.Equal(got, []string{img.GraphDriver.Data["UpperDir"], img.GraphDriver.Data["LowerDir"]}) {
		t.Errorf("layers mounted on %s: %v, want upper then lower", dir0, got)
	}

	st, err := e.s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*runtimeapi.Mount{}
	for _, m := range st.Status.Mounts {
		byPath[m.ContainerPath] = m
	}
	for path, want := range map[string]struct{ image, sub string }{"/mnt/all": {e.imageID, ""}, "/mnt/etc": {volumeImage, "etc"}, "/mnt/cfg": {volumeImage, "config"}} {
		m := byPath[path]
		if m == nil || !m.Readonly || m.HostPath != "" || m.Image.GetImage() != want.image || m.Image.GetUserSpecifiedImage() != "content:1" || m.Image.GetImageRef() != e.imageID || m.ImageSubPath != want.sub {
			t.Errorf("mount %s reported as %v; want image %q (ref %s), sub path %q, read-only", path, m, want.image, e.imageID, want.sub)
		}
	}

	_, err = e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "k8s_c_p_ns_uid-p_2") {
		t.Errorf("RemoveImage of a mounted image = %v, want FailedPrecondition naming the container", err)
	}
	if _, err := e.fake.InspectImage(ctx, volumeImage); err != nil {
		t.Errorf("image gone after a refused RemoveImage: %v", err)
	}

	for range 2 { // idempotent
		if _, err := e.s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("RemoveContainer: %v", err)
		}
	}
	if e.mounter.count() != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("after RemoveContainer: %d mounts, left %v", e.mounter.count(), e.leftovers(t))
	}
	if _, err := e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage once no container mounts it: %v", err)
	}
}

func TestImageVolumeNativeMountOnAPI148(t *testing.T) {
	e := newImageVolumeEnv(t, "1.48")
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt/etc", volumeImage, "./etc")))
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if e.mounter.mounts != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("mounted %d images itself (left %v); Docker mounts images on API 1.48", e.mounter.mounts, e.leftovers(t))
	}
	c, _ := e.fake.InspectContainer(ctx, id)
	want := mount.Mount{Type: mount.TypeImage, Source: e.imageID, Target: "/mnt/etc", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "etc"}}
	if len(c.HostConfig.Mounts) != 1 || c.HostConfig.Mounts[0].Type != want.Type || c.HostConfig.Mounts[0].Source != want.Source ||
		c.HostConfig.Mounts[0].Target != want.Target || !c.HostConfig.Mounts[0].ReadOnly || *c.HostConfig.Mounts[0].ImageOptions != *want.ImageOptions {
		t.Errorf("docker mounts %+v, want %+v", c.HostConfig.Mounts, want)
	}
	st, err := e.s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if ms := st.Status.Mounts; len(ms) != 1 || ms[0].Image.GetImageRef() != e.imageID || ms[0].ImageSubPath != "etc" || !ms[0].Readonly {
		t.Errorf("reported mounts %v", ms)
	}
	_, err = e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: e.imageID}})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := e.s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: e.imageID}}); err != nil {
		t.Errorf("RemoveImage after RemoveContainer: %v", err)
	}
}

// Docker 29 accepts a missing image sub path at create and fails at start (the fake does the
// same): CreateContainer asks Docker to resolve the sub paths (the archive API) and refuses
// with NotFound, leaving no container; a sub path through a file is InvalidArgument.
func TestImageVolumeNativeSubPathCheckedAtCreate(t *testing.T) {
	e := newImageVolumeEnv(t, "1.48")
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		mounts   []*runtimeapi.Mount
		code     codes.Code
		fragment string
	}{
		{"missing", []*runtimeapi.Mount{imageMount("/mnt/etc", volumeImage, "etc"), imageMount("/mnt/x", volumeImage, "not-existing")}, codes.NotFound, `image_sub_path "not-existing" of image "example.com/content:1" at "/mnt/x" does not exist`},
		{"through a file", []*runtimeapi.Mount{imageMount("/mnt/x", volumeImage, "bin/sh/x")}, codes.InvalidArgument, `image_sub_path "bin/sh/x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.fake.ResetCalls()
			_, err := e.create(imageVolumeConfig("c", tc.mounts...))
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.fragment) {
				t.Errorf("CreateContainer = %v, want %v mentioning %q", err, tc.code, tc.fragment)
			}
			if n := e.fake.Calls("StatContainerPath"); n != 1 {
				t.Errorf("%d StatContainerPath calls, want 1 for all the mounts", n)
			}
			if e.containers(t) != 0 || e.fake.Calls("RemoveContainer") != 1 || e.mounter.mounts != 0 || len(e.leftovers(t)) != 0 || e.s.imageVolumes.Len() != 0 {
				t.Errorf("left %d containers (%d removed), %d mounts made, files %v, %d in the index", e.containers(t), e.fake.Calls("RemoveContainer"), e.mounter.mounts, e.leftovers(t), e.s.imageVolumes.Len())
			}
		})
	}
	if _, err := e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage after refused creates: %v", err)
	}
}

func TestImageVolumeNativeSubPathCheckCostsOneCallOnlyWithSubPaths(t *testing.T) {
	e := newImageVolumeEnv(t, "1.48")
	ctx := context.Background()
	e.fake.ResetCalls()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt/all", volumeImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls("StatContainerPath"); n != 0 {
		t.Errorf("%d StatContainerPath calls without a sub path, want 0", n)
	}
	id2, err := e.create(imageVolumeConfig("d", imageMount("/mnt/etc", volumeImage, "etc"), imageMount("/mnt/conf", volumeImage, "data/x.conf")))
	if err != nil {
		t.Fatalf("CreateContainer with existing sub paths: %v", err)
	}
	if n := e.fake.Calls("StatContainerPath"); n != 1 {
		t.Errorf("%d StatContainerPath calls, want 1", n)
	}
	for _, c := range []string{id, id2} {
		if _, err := e.s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c}); err != nil {
			t.Errorf("StartContainer: %v", err)
		}
	}
	// The fallback never asks: it resolves sub paths in its own mounts.
	f := newImageVolumeEnv(t, "1.41")
	if _, err := f.create(imageVolumeConfig("c", imageMount("/mnt/etc", volumeImage, "etc"))); err != nil || f.fake.Calls("StatContainerPath") != 0 {
		t.Errorf("fallback CreateContainer: %v, %d StatContainerPath calls", err, f.fake.Calls("StatContainerPath"))
	}
}

// A container that Docker cannot start for a missing sub path (one created before
// CreateContainer checked): StartContainer says NotFound for the sub path, not for the container.
func TestImageVolumeNativeStartWithMissingSubPath(t *testing.T) {
	e := newImageVolumeEnv(t, "1.48")
	ctx := context.Background()
	// The label as CreateContainer writes it (imagevolume's imageVolumeSet).
	raw := fmt.Sprintf(`{"v":1,"mounts":[{"containerPath":"/mnt/x","image":%q,"imageId":%q,"subPath":"not-existing","native":true,"index":0}]}`, volumeImage, e.imageID)
	id, err := e.fake.CreateContainer(ctx, "k8s_old_p_ns_uid_0",
		&container.Config{Image: volumeImage, Labels: map[string]string{containerTypeLabel: containerTypeContainer, sandboxIDLabel: "sandbox-of-old", imagevolume.Label: raw}},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeImage, Source: e.imageID, Target: "/mnt/x", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "not-existing"}}}})
	if err != nil {
		t.Fatalf("Docker create: %v", err)
	}
	s2 := newTestService(t, e.fake, Options{RootDirectory: e.root, imageVolumeMounter: e.mounter})
	defer s2.Close()
	_, err = s2.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `image_sub_path "not-existing" of image "example.com/content:1" at "/mnt/x" does not exist`) || !strings.Contains(err.Error(), "cannot access path") {
		t.Errorf("StartContainer = %v, want NotFound for the sub path with Docker's reason", err)
	}
	c, _ := e.fake.InspectContainer(ctx, id)
	if c.State.Status != container.StateCreated || c.State.ExitCode != 128 || !strings.Contains(c.State.Error, "not-existing") {
		t.Errorf("state after the failed start: %+v", c.State)
	}
	if _, err := s2.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if e.containers(t) != 0 || s2.imageVolumes.Len() != 0 {
		t.Errorf("after RemoveContainer: %d containers, %d in the index", e.containers(t), s2.imageVolumes.Len())
	}
}

func TestImageVolumeBadRequestsLeaveNothing(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ro := func(m *runtimeapi.Mount) *runtimeapi.Mount { m.Readonly = false; return m }
	both := func(m *runtimeapi.Mount) *runtimeapi.Mount { m.HostPath = "/srv"; return m }
	for _, tc := range []struct {
		name     string
		mount    *runtimeapi.Mount
		code     codes.Code
		fragment string
	}{
		{"writable", ro(imageMount("/mnt", volumeImage, "")), codes.InvalidArgument, "read-only"},
		{"host path too", both(imageMount("/mnt", volumeImage, "")), codes.InvalidArgument, "not both"},
		{"relative container path", imageMount("mnt", volumeImage, ""), codes.InvalidArgument, "absolute"},
		{"absolute sub path", imageMount("/mnt", volumeImage, "/etc"), codes.InvalidArgument, "relative"},
		{"sub path climbs out", imageMount("/mnt", volumeImage, "etc/../../x"), codes.InvalidArgument, `".."`},
		{"missing image", imageMount("/mnt", "example.com/absent:1", ""), codes.NotFound, "pull it first"},
		{"missing sub path", imageMount("/mnt", volumeImage, "not-existing"), codes.NotFound, "does not exist"},
		{"sub path through a file", imageMount("/mnt", volumeImage, "bin/sh/x"), codes.InvalidArgument, "not a directory"},
		{"symlink leads out", imageMount("/mnt", volumeImage, "escape"), codes.InvalidArgument, "leads out of the image"},
		{"symlink climbs out", imageMount("/mnt", volumeImage, "nested"), codes.InvalidArgument, "leads out of the image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.create(imageVolumeConfig("c", tc.mount))
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.fragment) {
				t.Errorf("CreateContainer = %v, want %v mentioning %q", err, tc.code, tc.fragment)
			}
			if e.containers(t) != 0 || e.mounter.count() != 0 || len(e.leftovers(t)) != 0 || e.s.imageVolumes.Len() != 0 {
				t.Errorf("left %d containers, %d mounts, files %v, %d in the index", e.containers(t), e.mounter.count(), e.leftovers(t), e.s.imageVolumes.Len())
			}
		})
	}
}

func TestImageVolumeFailedCreateLeavesNoMount(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	e.fake.InjectError("CreateContainer", cerrdefs.ErrUnavailable)
	if _, err := e.create(imageVolumeConfig("c", imageMount("/mnt/a", volumeImage, ""), imageMount("/mnt/b", volumeImage, "etc"))); err == nil {
		t.Fatal("CreateContainer succeeded despite Docker's error")
	}
	if e.mounter.mounts != 2 || e.mounter.count() != 0 || len(e.leftovers(t)) != 0 || e.s.imageVolumes.Len() != 0 {
		t.Errorf("after a failed create: %d of %d mounts left, files %v, %d in the index", e.mounter.count(), e.mounter.mounts, e.leftovers(t), e.s.imageVolumes.Len())
	}
	if _, err := e.s.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage after a failed create: %v", err)
	}
}

func TestImageVolumeOtherStorageDriverNeedsNewerDocker(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	img := libdocker.FakeImage("", "", "example.com/zfs:1")
	img.GraphDriver.Name = "zfs"
	e.fake.AddImage(img)
	_, err := e.create(imageVolumeConfig("c", imageMount("/mnt", "example.com/zfs:1", "")))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"zfs"`) || !strings.Contains(err.Error(), "1.48") {
		t.Errorf("CreateContainer = %v, want FailedPrecondition naming the driver and API 1.48", err)
	}
	if e.containers(t) != 0 || e.s.imageVolumes.Len() != 0 {
		t.Errorf("left a container or an index entry")
	}
}

func TestImageVolumeSurvivesRestartAndIsMountedAgainAtStart(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt/etc", volumeImage, "etc")))
	if err != nil {
		t.Fatal(err)
	}
	// An orphan of a crashed create: nothing records it.
	orphan := filepath.Join(e.root, imagevolume.Dir, "0123456789abcdef", "0")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	img, _ := e.fake.InspectImage(ctx, volumeImage)
	if err := e.mounter.MountLayers(orphan, []string{img.GraphDriver.Data["UpperDir"]}); err != nil {
		t.Fatal(err)
	}

	// A second process on the same Docker and root directory: a restart.
	s2 := newTestService(t, e.fake, Options{RootDirectory: e.root, imageVolumeMounter: e.mounter})
	defer s2.Close()
	if e.mounter.count() != 1 {
		t.Errorf("%d mounts after the restart, want only the container's (the orphan removed)", e.mounter.count())
	}
	if _, err := os.Stat(filepath.Dir(orphan)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan directory still there: %v", err)
	}
	_, err = s2.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}})
	wantCode(t, err, codes.FailedPrecondition)
	// The refusal names the container by its Docker name, known again from the list at start.
	inspected, _ := e.fake.InspectContainer(ctx, id)
	if name := strings.TrimPrefix(inspected.Name, "/"); err == nil || !strings.Contains(err.Error(), "container "+name) {
		t.Errorf("RemoveImage after the restart: %v, want it to name container %s", err, name)
	}

	// A reboot: the mount is gone; StartContainer mounts it again before Docker starts.
	for p := range e.mounter.mounted {
		_ = e.mounter.Unmount(p)
	}
	before := e.mounter.mounts
	if _, err := s2.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if e.mounter.mounts != before+1 || e.mounter.count() != 1 {
		t.Errorf("StartContainer did not mount the image volume again (%d mounts)", e.mounter.count())
	}
	c, _ := e.fake.InspectContainer(ctx, id)
	if _, err := os.Stat(filepath.Join(c.HostConfig.Mounts[0].Source, "passwd")); err != nil {
		t.Errorf("bind source has no passwd after the new mount: %v", err)
	}
	// Started again while mounted: nothing to do.
	if _, err := s2.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil || e.mounter.mounts != before+1 {
		t.Errorf("second StartContainer: %v, %d mounts made", err, e.mounter.mounts-before)
	}
	if _, err := s2.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if e.mounter.count() != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("after RemoveContainer: %d mounts, left %v", e.mounter.count(), e.leftovers(t))
	}
}

func TestImageVolumeOfContainerRemovedBehindOurBackIsReleased(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt", volumeImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	id2, err := e.create(imageVolumeConfig("d", imageMount("/mnt", volumeImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	// RemovePodSandbox or docker rm: no RemoveContainer.
	if err := e.fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	e.s.imageVolumes.Reap(ctx)
	if e.mounter.count() != 1 {
		t.Errorf("%d mounts after the reaper, want the remaining container's only", e.mounter.count())
	}
	if err := e.fake.RemoveContainer(ctx, id2, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	// RemoveImage checks with Docker before it refuses.
	if _, err := e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Errorf("RemoveImage of an image no existing container mounts: %v", err)
	}
	if e.mounter.count() != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("%d mounts, left %v", e.mounter.count(), e.leftovers(t))
	}
}

// RemoveContainer by an ID prefix of a container removed behind our back (Docker knows the
// prefix no more) still releases its image volumes.
func TestImageVolumeReleasedByRemoveContainerOfAPrefix(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt", volumeImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id[:12]}); err != nil {
		t.Fatal(err)
	}
	if e.mounter.count() != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("%d mounts, left %v after RemoveContainer(%s)", e.mounter.count(), e.leftovers(t), id[:12])
	}
}

// RemoveContainer fails while its image volumes cannot be unmounted, keeping them for the
// kubelet's next try, which removes them.
func TestImageVolumeUnmountFailureFailsRemoveContainer(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ctx := context.Background()
	id, err := e.create(imageVolumeConfig("c", imageMount("/mnt", volumeImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	e.mounter.mu.Lock()
	e.mounter.unmountErr = errors.New("device or resource busy")
	e.mounter.mu.Unlock()
	if _, err := e.s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err == nil {
		t.Error("RemoveContainer succeeded although its image volume could not be unmounted")
	}
	e.mounter.mu.Lock()
	e.mounter.unmountErr = nil
	e.mounter.mu.Unlock()
	if _, err := e.s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if e.mounter.count() != 0 || len(e.leftovers(t)) != 0 {
		t.Errorf("%d mounts, left %v after the retry", e.mounter.count(), e.leftovers(t))
	}
}

// Image volumes released without faults, by the reaper, by RemoveImage's check, after a failed
// create, and at a start for a directory no container uses, log no warning about them.
func TestImageVolumeReleasesWithoutFaultsLogNoWarnings(t *testing.T) {
	e := newImageVolumeEnv(t, "1.41")
	ctx := context.Background()
	logged := warnings(e.s)
	for _, name := range []string{"reaped", "checked"} {
		id, err := e.create(imageVolumeConfig(name, imageMount("/mnt", volumeImage, "")))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		if name == "reaped" {
			e.s.imageVolumes.Reap(ctx)
		}
	}
	if _, err := e.s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: volumeImage}}); err != nil {
		t.Fatal(err)
	}
	e.imageID = e.fake.AddImage(overlayImage(t, volumeImage))
	e.fake.InjectError("CreateContainer", cerrdefs.ErrUnavailable)
	if _, err := e.create(imageVolumeConfig("failed", imageMount("/mnt", volumeImage, ""))); err == nil {
		t.Fatal("CreateContainer succeeded despite Docker's error")
	}
	if err := os.MkdirAll(filepath.Join(e.root, imagevolume.Dir, "orphan", "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	logger, hook := logtest.NewNullLogger()
	again, err := New(ctx, e.fake, Options{RootDirectory: e.root, imageVolumeMounter: e.mounter, PodInfraImage: testPauseImage, DefaultRuntimeHandler: "docker", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("left after a start: %v", left)
	}
	got := logged()
	for _, entry := range hook.AllEntries() {
		if entry.Level <= logrus.WarnLevel {
			got = append(got, "at the start: "+entry.Message)
		}
	}
	for _, w := range got {
		if strings.Contains(w, "image volume") {
			t.Error(w)
		}
	}
}
