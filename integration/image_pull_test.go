//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testRegistry is a registry (distribution API v2, pull only) serving one single-layer image
// on 127.0.0.1, which Docker treats as an insecure registry by default: plain HTTP, no CA or
// /etc/hosts entry, nothing shared with other tests or the critest registry.
type testRegistry struct {
	host           string // 127.0.0.1:PORT
	manifestDigest string
	// layerRequests gets one value per download of the layer.
	layerRequests chan struct{}
}

// startTestRegistry serves the image under every repository and tag. With stallLayer, the
// layer download sends half the layer and then nothing until Docker gives up.
func startTestRegistry(t *testing.T, stallLayer bool) *testRegistry {
	t.Helper()
	layer, diffID := testLayer(t)
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{"/hello"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digestOf(config)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer), "digest": digestOf(layer)}},
	})
	r := &testRegistry{manifestDigest: digestOf(manifest), layerRequests: make(chan struct{}, 10)}
	blobs := map[string][]byte{digestOf(config): config, digestOf(layer): layer}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		path := req.URL.Path
		switch {
		case path == "/v2/":
		case strings.Contains(path, "/manifests/"):
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			w.Header().Set("Docker-Content-Digest", r.manifestDigest)
			serveBlob(w, req, manifest)
		case strings.Contains(path, "/blobs/"):
			dgst := path[strings.LastIndex(path, "/")+1:]
			blob, ok := blobs[dgst]
			if !ok {
				http.NotFound(w, req)
				return
			}
			if dgst != digestOf(layer) || req.Method != http.MethodGet {
				serveBlob(w, req, blob)
				return
			}
			r.layerRequests <- struct{}{}
			if !stallLayer {
				serveBlob(w, req, blob)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
			_, _ = w.Write(blob[:len(blob)/2])
			w.(http.Flusher).Flush()
			select {
			case <-req.Context().Done():
			case <-stop:
			}
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	r.host = srv.Listener.Addr().String()
	return r
}

func serveBlob(w http.ResponseWriter, req *http.Request, b []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if req.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// testLayer is a gzipped tar with one file of random content (a layer no other image has, so
// Docker downloads it) and its diff ID.
func testLayer(t *testing.T) (gz []byte, diffID string) {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	content := []byte("cri-dockerd integration test layer " + randHex() + randHex() + "\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(content)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(raw.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), digestOf(raw.Bytes())
}

// removeImageAtEnd removes an image the test pulled, whatever happened.
func removeImageAtEnd(t *testing.T, ref string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := suite.docker.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !client.IsErrNotFound(err) {
			t.Errorf("cleanup: remove image %s: %v", ref, err)
		}
	})
}

// The kubelet copies ContainerStatus.image_ref into the pod's imageID: as upstream, it is
// docker-pullable://REPO@DIGEST for an image pulled from a registry, docker://ID for one that
// has no repo digest or is gone; image_id and the listed container's image_ref stay the ID.
func TestContainerStatusImageRefIsUpstreamsPullableForm(t *testing.T) {
	reg := startTestRegistry(t, false)
	d := StartDaemon(t)
	ctx := t.Context()
	repo := reg.host + "/cri-dockerd-test/pullable-" + randHex()
	ref := repo + ":1"
	removeImageAtEnd(t, ref)
	pulled, err := d.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("PullImage(%s): %v", ref, err)
	}
	st, err := d.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	wantDigest := repo + "@" + reg.manifestDigest
	if err != nil || st.Image == nil || st.Image.Id != pulled.ImageRef || len(st.Image.RepoDigests) != 1 || st.Image.RepoDigests[0] != wantDigest {
		t.Fatalf("ImageStatus(%s) = %v, %v; want id %s and repo digest %s", ref, st, err, pulled.ImageRef, wantDigest)
	}
	if !strings.Contains(d.readLog(), "Stop pulling image "+ref) {
		t.Errorf("no final progress line for the pull in the log")
	}
	localID, localTags := distinctImage(t) // committed here: no repo digest

	podCfg := newPodConfig(t, "imageref")
	sandboxID := runPod(t, d, podCfg, "")
	create := func(name string, spec *runtimeapi.ImageSpec) string {
		cfg := containerConfig(name, "true")
		cfg.Image, cfg.Command = spec, []string{"/hello"} // created only, never started
		return createContainer(t, d, sandboxID, podCfg, cfg)
	}
	fromRegistry := create("pulled", &runtimeapi.ImageSpec{Image: pulled.ImageRef, UserSpecifiedImage: ref})
	local := create("local", &runtimeapi.ImageSpec{Image: localTags[0]})

	check := func(name, id, imageID, wantRef string) {
		t.Helper()
		resp, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("%s: ContainerStatus: %v", name, err)
		}
		if s := resp.Status; s.ImageRef != wantRef || s.ImageId != imageID {
			t.Errorf("%s: image_ref %q image_id %q, want %q and %q", name, s.ImageRef, s.ImageId, wantRef, imageID)
		}
		list, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
		if err != nil || len(list.Containers) != 1 {
			t.Fatalf("%s: ListContainers = %v, %v", name, list, err)
		}
		if c := list.Containers[0]; c.ImageRef != imageID || c.ImageId != imageID {
			t.Errorf("%s: listed image_ref %q image_id %q, want the image ID %q (the kubelet's image GC)", name, c.ImageRef, c.ImageId, imageID)
		}
	}
	check("pulled from a registry", fromRegistry, pulled.ImageRef, "docker-pullable://"+wantDigest)
	// A committed image has no repo digest on the classic store; the containerd store gives it
	// one of its own (REPO@ID), which upstream's rule reports as docker-pullable://.
	localRef := "docker://" + localID
	if inspected, err := suite.docker.ImageInspect(ctx, localID); err == nil && len(inspected.RepoDigests) > 0 {
		localRef = "docker-pullable://" + inspected.RepoDigests[0]
	}
	check("committed locally", local, localID, localRef)

	// Gone: Docker removes the image by force from under its (created, not running) container.
	if _, err := suite.docker.ImageRemove(ctx, localID, image.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("docker rmi -f %s: %v", localID, err)
	}
	if _, err := suite.docker.ImageInspect(ctx, localID); !client.IsErrNotFound(err) {
		t.Fatalf("image %s still there after docker rmi -f (inspect: %v)", localID, err)
	}
	check("image removed", local, localID, "docker://"+localID)
}

// A pull whose download stalls is cancelled after --image-pull-progress-deadline, with an
// error naming the image, the deadline and the last progress; the kubelet's next try gets a
// download of its own. (Docker 20.10 does not close a cancelled pull's stalled connection to
// the registry, so the test cannot wait for that.)
func TestPullImageProgressDeadlineCancelsStalledDownload(t *testing.T) {
	reg := startTestRegistry(t, true)
	d := StartDaemon(t, "--image-pull-progress-deadline=2s")
	ref := reg.host + "/cri-dockerd-test/stalled-" + randHex() + ":1"
	removeImageAtEnd(t, ref)
	for try := 1; try <= 2; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		_, err := d.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			t.Fatalf("try %d: PullImage(%s) succeeded with a stalled layer", try, ref)
		}
		t.Logf("try %d: PullImage: %v", try, err)
		if timedOut {
			t.Fatalf("try %d: PullImage ran into the test's deadline, not the progress deadline: %v", try, err)
		}
		for _, want := range []string{ref, "no pull progress for 2s", "(last: "} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("try %d: error %q does not contain %q", try, err, want)
			}
		}
		if got := len(reg.layerRequests); got != try {
			t.Errorf("after try %d: Docker asked for the layer %d times, want %d (a new download per try)", try, got, try)
		}
	}
	if !strings.Contains(d.readLog(), "Stop pulling image "+ref) {
		t.Errorf("no final progress line for the cancelled pull in the log")
	}
}
