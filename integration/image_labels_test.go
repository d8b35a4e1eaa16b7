//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// labelledImage commits a busybox container with the given image labels; removed at the end.
func labelledImage(t *testing.T, labels map[string]string) string {
	t.Helper()
	ctx := t.Context()
	suffix := randHex()
	tag := "cri-dockerd-test/labelled-" + suffix + ":1"
	c, err := suite.docker.ContainerCreate(ctx, &container.Config{Image: busyboxImage, Cmd: []string{"true"}}, nil, nil, nil, "crid-it-labels-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer suite.docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	var changes []string
	for k, v := range labels {
		raw, _ := json.Marshal(v) // quoted: values hold spaces and braces
		changes = append(changes, "LABEL "+k+"="+string(raw))
	}
	committed, err := suite.docker.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: tag, Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = suite.docker.ImageRemove(context.Background(), committed.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return tag
}

// An image whose labels name our keys changes nothing we do or report: not the image
// ContainerStatus names, not where the output goes for a client that sends no log_path, not
// the cgroup files StartContainer writes, not the images RemoveImage keeps for image volumes
// (after a restart, which rebuilds that index from the labels).
func TestImageLabelsUnderOurKeysChangeNothing(t *testing.T) {
	d := StartDaemon(t)
	evilDir := t.TempDir()
	evilLog := filepath.Join(evilDir, "evil.log")
	pinID, pinTags := distinctImage(t)
	record, _ := json.Marshal(map[string]any{"v": 1, "mounts": []map[string]any{
		{"containerPath": "/pinned", "image": pinTags[0], "imageId": pinID, "native": true, "index": 0},
	}})
	tag := labelledImage(t, map[string]string{
		"io.cri-dockerd.user-image":       "evil.example/backdoor:latest",
		"io.kubernetes.container.logpath": evilLog,
		"io.cri-dockerd.log":              "cri",
		"io.cri-dockerd.log-directory":    evilDir,
		"io.cri-dockerd.cgroup-v2":        `{"memory.high":"4096"}`,
		"io.cri-dockerd.image-volumes":    string(record),
	})
	podCfg := newPodConfig(t, "imglabels")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("app", "echo to-nowhere")
	cfg.LogPath = "" // the client asks for no log file
	cfg.Image = &runtimeapi.ImageSpec{Image: tag}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id) // the image's cgroup v2 map is not written (on cgroup v1 it fails the start)
	st := waitExited(t, d, id)
	if strings.Contains(st.Image.GetImage()+st.Image.GetUserSpecifiedImage()+st.ImageRef, "evil") {
		t.Errorf("ContainerStatus reports the image's label as its image: %v, ref %s", st.Image, st.ImageRef)
	}
	if st.LogPath != "" {
		t.Errorf("ContainerStatus reports log path %q, want none (the client sent none)", st.LogPath)
	}
	if len(st.Mounts) != 0 {
		t.Errorf("ContainerStatus reports the image's mounts: %v", st.Mounts)
	}
	if _, err := os.Stat(evilLog); err == nil {
		t.Errorf("output written to %s, where the image's label said", evilLog)
	}
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"io.cri-dockerd.user-image", "io.kubernetes.container.logpath", "io.cri-dockerd.log", "io.cri-dockerd.cgroup-v2", "io.cri-dockerd.image-volumes"} {
		if v := c.Config.Labels[k]; v != "" {
			t.Errorf("Docker label %s = %q: the image's value landed", k, v)
		}
	}
	// After a restart (the log followers and the image-volume index start from the labels),
	// the image is not kept from removal, and nothing was written where the image said.
	d.Restart()
	if _, err := d.Images.RemoveImage(t.Context(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: pinID}}); err != nil {
		t.Errorf("RemoveImage of the image the label named: %v", err)
	}
	if _, err := os.Stat(evilLog); err == nil {
		t.Errorf("output written to %s, where the image's label said", evilLog)
	}
}
