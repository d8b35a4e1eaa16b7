//go:build integration

package integration

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// volumeSourceImage builds an image of two layers (busybox and a commit that adds
// /extra/file), so that cri-dockerd mounts it as an overlay; busybox itself has one layer and
// is mounted as a read-only bind. Removed at the end of the test.
func volumeSourceImage(t *testing.T) (id, tag string) {
	t.Helper()
	ctx := t.Context()
	suffix := randHex()
	tag = "cri-dockerd-test/image-volume-" + suffix + ":1"
	c, err := suite.docker.ContainerCreate(ctx, &container.Config{Image: busyboxImage, Cmd: []string{"sh", "-c", "mkdir /extra && echo hello-" + suffix + " >/extra/file"}}, nil, nil, nil, "crid-it-imgvol-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer suite.docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if err := suite.docker.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := suite.docker.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	}
	committed, err := suite.docker.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = suite.docker.ImageRemove(context.Background(), committed.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return committed.ID, tag
}

func volExec(t *testing.T, d *Daemon, id string, cmd ...string) (string, int32) {
	t.Helper()
	resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
	if err != nil {
		t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	return string(resp.Stdout) + string(resp.Stderr), resp.ExitCode
}

// mountsUnder lists the mount points of this mount namespace at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

func imageVolume(path, img, sub string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: path, Readonly: true, Image: &runtimeapi.ImageSpec{Image: img, UserSpecifiedImage: img}, ImageSubPath: sub}
}

// nativeImageMounts: Docker (Engine API >= 1.48, Docker 28+) mounts image volumes itself (mount
// type image), and cri-dockerd makes no mounts of its own under <root>/image-volumes.
func nativeImageMounts() bool {
	return versions.GreaterThanOrEqualTo(suite.docker.ClientVersion(), "1.48")
}

// dockerImageMounts checks that docker inspect of container id shows the image volumes want
// (target -> image ID and sub path) as Docker's read-only mounts of type image, and returns
// where Docker mounted each image on the host.
func dockerImageMounts(t *testing.T, id string, want map[string][2]string) []string {
	t.Helper()
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, m := range c.HostConfig.Mounts {
		w, ok := want[m.Target]
		if !ok {
			continue
		}
		sub := ""
		if m.ImageOptions != nil {
			sub = m.ImageOptions.Subpath
		}
		if m.Type != mount.TypeImage || m.Source != w[0] || sub != w[1] || !m.ReadOnly {
			t.Errorf("HostConfig mount at %s: %+v (image options %+v); want type image of %s, sub path %q, read-only", m.Target, m, m.ImageOptions, w[0], w[1])
		}
		found[m.Target] = true
	}
	var sources []string
	for _, m := range c.Mounts {
		if _, ok := want[m.Destination]; !ok {
			continue
		}
		if m.Type != mount.TypeImage || m.RW {
			t.Errorf("inspect mount at %s: %+v; want a read-only mount of type image", m.Destination, m)
		}
		if m.Source != "" {
			sources = append(sources, m.Source)
		}
	}
	if len(found) != len(want) || len(sources) != len(want) {
		t.Errorf("docker inspect has image mounts at %v (host paths %v), want %v (mounts %+v)", found, sources, want, c.HostConfig.Mounts)
	}
	return sources
}

// stillMounted lists which of paths are mount points in this mount namespace.
func stillMounted(t *testing.T, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		if len(mountsUnder(t, p)) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// noOwnMounts checks that cri-dockerd mounted nothing under volDir and left nothing in it.
func noOwnMounts(t *testing.T, volDir, when string) {
	t.Helper()
	if got := mountsUnder(t, volDir); len(got) != 0 {
		t.Errorf("mounts under %s %s: %v, want none", volDir, when, got)
	}
	if entries, _ := os.ReadDir(volDir); len(entries) != 0 {
		t.Errorf("directories in %s %s: %v", volDir, when, entries)
	}
}

func TestImageVolumeMountReadOnlyAcrossRestart(t *testing.T) {
	d := StartDaemon(t)
	ctx := t.Context()
	volDir := filepath.Join(d.Dir, "root", "image-volumes")
	bb, err := d.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
	if err != nil || bb.Image == nil {
		t.Fatalf("ImageStatus(%s) = %v, %v", busyboxImage, bb, err)
	}
	imgID, tag := volumeSourceImage(t)
	podCfg := newPodConfig(t, "imgvol")
	sandboxID := runPod(t, d, podCfg, "")

	cfg := containerConfig("vol", sleeper)
	cfg.Mounts = []*runtimeapi.Mount{
		imageVolume("/mnt/image-volume", bb.Image.Id, ""),
		imageVolume("/mnt/layers", tag, ""),
		imageVolume("/mnt/extra", tag, "extra"),
	}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	native := nativeImageMounts()
	var dockerMounts []string
	if native {
		noOwnMounts(t, volDir, "after create")
		dockerMounts = dockerImageMounts(t, id, map[string][2]string{"/mnt/image-volume": {bb.Image.Id, ""}, "/mnt/layers": {imgID, ""}, "/mnt/extra": {imgID, "extra"}})
	} else if got := mountsUnder(t, volDir); len(got) != 3 {
		t.Errorf("mounts under %s after create: %v, want 3", volDir, got)
	}
	startContainer(t, d, id)

	checkContent := func() {
		t.Helper()
		if out, code := volExec(t, d, id, "ls", "-A", "/mnt/image-volume/bin/sh"); code != 0 {
			t.Errorf("ls /mnt/image-volume/bin/sh: exit %d: %s", code, out)
		}
		for _, p := range []string{"/mnt/image-volume/x", "/mnt/layers/x", "/mnt/extra/x"} {
			if out, code := volExec(t, d, id, "touch", p); code == 0 {
				t.Errorf("touch %s succeeded on a read-only image volume: %s", p, out)
			}
		}
		// Executable, from the two-layer image: not noexec, and both layers visible.
		if out, code := volExec(t, d, id, "/mnt/layers/bin/cat", "/mnt/layers/extra/file"); code != 0 || !strings.HasPrefix(out, "hello-") {
			t.Errorf("/mnt/layers/bin/cat /mnt/layers/extra/file: exit %d: %q", code, out)
		}
		if out, code := volExec(t, d, id, "ls", "/mnt/extra"); code != 0 || strings.TrimSpace(out) != "file" {
			t.Errorf("ls of the sub path mount: exit %d: %q, want only \"file\"", code, out)
		}
	}
	checkContent()

	st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"/mnt/image-volume": {bb.Image.Id, ""}, "/mnt/layers": {imgID, ""}, "/mnt/extra": {imgID, "extra"}}
	for _, m := range st.Status.Mounts {
		if w, ok := want[m.ContainerPath]; ok {
			if m.Image.GetImageRef() != w[0] || m.ImageSubPath != w[1] || !m.Readonly || m.HostPath != "" {
				t.Errorf("ContainerStatus mount %v; want image_ref %s, sub path %q, read-only, no host path", m, w[0], w[1])
			}
			delete(want, m.ContainerPath)
		}
	}
	if len(want) != 0 {
		t.Errorf("ContainerStatus lacks the image volumes at %v (mounts: %v)", want, st.Status.Mounts)
	}

	_, err = d.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: tag}})
	wantCode(t, err, codes.FailedPrecondition, "image volume", "k8s_vol_"+podCfg.Metadata.Name)
	if _, err := suite.docker.ImageInspect(ctx, tag); err != nil {
		t.Errorf("image gone after a refused RemoveImage: %v", err)
	}

	// A reboot takes our mounts away: StartContainer mounts them again. Docker's own mounts
	// are Docker's business: the container only stops and starts again.
	stop := func() {
		t.Helper()
		if _, err := d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if !native {
		for _, p := range mountsUnder(t, volDir) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Fatalf("umount %s: %v", p, err)
			}
		}
	}
	startContainer(t, d, id)
	checkContent()

	// After a restart of cri-dockerd, labels tell what to refuse and what to unmount, and the
	// container still runs and starts.
	d.Restart()
	checkContent()
	stop()
	startContainer(t, d, id)
	checkContent()
	_, err = d.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: imgID}})
	wantCode(t, err, codes.FailedPrecondition, "k8s_vol_")
	if m := stillMounted(t, dockerMounts); native && len(m) != len(dockerMounts) {
		t.Errorf("Docker's image mounts: %v of %v mounted before RemoveContainer", m, dockerMounts)
	}
	if _, err := d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	noOwnMounts(t, volDir, "after RemoveContainer")
	if native {
		if _, err := suite.docker.ContainerInspect(ctx, id); !client.IsErrNotFound(err) {
			t.Errorf("docker inspect after RemoveContainer: %v, want not found", err)
		}
		if left := stillMounted(t, dockerMounts); len(left) != 0 {
			t.Errorf("Docker's image mounts %v still mounted after RemoveContainer", left)
		}
	}
	if _, err := d.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: tag}}); err != nil {
		t.Errorf("RemoveImage once no container mounts it: %v", err)
	}
}

func TestImageVolumeBadRequestsAndFailedCreateLeakNothing(t *testing.T) {
	d := StartDaemon(t)
	ctx := t.Context()
	volDir := filepath.Join(d.Dir, "root", "image-volumes")
	_, tag := volumeSourceImage(t)
	podCfg := newPodConfig(t, "imgvol-bad")
	sandboxID := runPod(t, d, podCfg, "")

	writable := imageVolume("/mnt/v", tag, "")
	writable.Readonly = false
	for _, tc := range []struct {
		name      string
		image     string // the container's own image
		mounts    []*runtimeapi.Mount
		code      codes.Code
		fragments []string
	}{
		{"readonly false", busyboxImage, []*runtimeapi.Mount{writable}, codes.InvalidArgument, []string{"read-only"}},
		// Docker 29 takes both at create and fails at start: cri-dockerd asks Docker to
		// resolve them before it answers, and removes the container it created.
		{"missing sub path", busyboxImage, []*runtimeapi.Mount{imageVolume("/mnt/a", tag, "extra"), imageVolume("/mnt/v", tag, "not-existing")}, codes.NotFound, []string{`image_sub_path "not-existing"`, "does not exist"}},
		{"sub path through a file", busyboxImage, []*runtimeapi.Mount{imageVolume("/mnt/v", tag, "bin/sh/x")}, codes.InvalidArgument, []string{"not a directory"}},
		{"sub path climbs out", busyboxImage, []*runtimeapi.Mount{imageVolume("/mnt/v", tag, "../etc")}, codes.InvalidArgument, []string{".."}},
		{"absolute sub path", busyboxImage, []*runtimeapi.Mount{imageVolume("/mnt/v", tag, "/etc")}, codes.InvalidArgument, []string{"relative"}},
		{"missing image", busyboxImage, []*runtimeapi.Mount{imageVolume("/mnt/v", "cri-dockerd-test/absent-"+randHex()+":1", "")}, codes.NotFound, []string{"pull it first"}},
		// Mounted (by the fallback), then Docker's create fails on the container's own image.
		{"docker create fails", "cri-dockerd-test/absent-" + randHex() + ":1", []*runtimeapi.Mount{imageVolume("/mnt/a", tag, ""), imageVolume("/mnt/b", busyboxImage, "bin")}, codes.NotFound, []string{"absent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := containerConfig("bad", sleeper)
			cfg.Image = &runtimeapi.ImageSpec{Image: tc.image}
			cfg.Mounts = tc.mounts
			_, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
			wantCode(t, err, tc.code, tc.fragments...)
			noOwnMounts(t, volDir, "after a failed create")
			for _, c := range podContainers(t, podCfg.Metadata) {
				if strings.Contains(c.Names[0], "_bad_") {
					t.Errorf("container %s left behind", c.Names[0])
				}
			}
		})
	}
	_, err := d.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: tag}})
	if err != nil {
		t.Errorf("RemoveImage after failed creates: %v", err)
	}
}

func TestImageVolumeReleasedWhenPodIsRemoved(t *testing.T) {
	d := StartDaemon(t)
	ctx := t.Context()
	volDir := filepath.Join(d.Dir, "root", "image-volumes")
	podCfg := newPodConfig(t, "imgvol-pod")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("vol", sleeper)
	cfg.Mounts = []*runtimeapi.Mount{imageVolume("/mnt/v", busyboxImage, "")}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id)
	native := nativeImageMounts()
	var dockerMounts []string
	if native {
		noOwnMounts(t, volDir, "of a running container")
		bb, err := suite.docker.ImageInspect(ctx, busyboxImage)
		if err != nil {
			t.Fatal(err)
		}
		dockerMounts = dockerImageMounts(t, id, map[string][2]string{"/mnt/v": {bb.ID, ""}})
		if len(stillMounted(t, dockerMounts)) == 0 {
			t.Fatalf("Docker's image mount %v is not mounted while the container runs", dockerMounts)
		}
	} else if len(mountsUnder(t, volDir)) == 0 {
		t.Fatalf("no image volume mounted under %s", volDir)
	}
	if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	// The pod's removal removes the container and releases its mounts before it answers.
	if left := mountsUnder(t, volDir); len(left) != 0 {
		t.Errorf("mounts left under %s after RemovePodSandbox: %v", volDir, left)
	}
	if native {
		if left := stillMounted(t, dockerMounts); len(left) != 0 {
			t.Errorf("Docker's image mounts %v still mounted after RemovePodSandbox", left)
		}
	}
	if _, err := suite.docker.ContainerInspect(ctx, id); !client.IsErrNotFound(err) {
		t.Errorf("docker inspect after RemovePodSandbox: %v, want not found", err)
	}
}
