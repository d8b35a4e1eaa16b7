//go:build integration

package integration

import (
	"slices"
	"sort"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestImageNamesAfterPullsByTagAndDigest pulls one image by tag, by digest, and by digest from a
// second repository, and compares what ListImages and ImageStatus say about it: the same
// repo_tags (the tag only: Docker 29's containerd store lists REPO@DIGEST among its RepoTags)
// and the same repo_digests (its list reports one repository's, its inspect every one's).
func TestImageNamesAfterPullsByTagAndDigest(t *testing.T) {
	reg := startTestRegistry(t, false)
	d := StartDaemon(t)
	ctx := t.Context()
	repo, mirror := reg.host+"/cri-dockerd-test/names-"+randHex(), reg.host+"/cri-dockerd-test/mirror-"+randHex()
	pulls := []string{repo + ":1", repo + "@" + reg.manifestDigest, mirror + "@" + reg.manifestDigest}
	var id string
	for _, ref := range pulls {
		removeImageAtEnd(t, ref)
		resp, err := d.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatalf("PullImage(%s): %v", ref, err)
		}
		if id != "" && resp.ImageRef != id {
			t.Fatalf("PullImage(%s) = %s, want the image pulled before, %s", ref, resp.ImageRef, id)
		}
		id = resp.ImageRef
	}
	wantTags := []string{repo + ":1"}
	wantDigests := []string{repo + "@" + reg.manifestDigest, mirror + "@" + reg.manifestDigest}
	sort.Strings(wantDigests)

	answers := map[string]*runtimeapi.Image{}
	list, err := d.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range list.Images {
		if img.Id == id {
			answers["ListImages"] = img
		}
	}
	for _, ref := range append([]string{id}, pulls...) {
		st, err := d.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil || st.Image == nil {
			t.Fatalf("ImageStatus(%s) = %v, %v", ref, st, err)
		}
		answers["ImageStatus "+ref] = st.Image
	}
	if answers["ListImages"] == nil {
		t.Fatalf("ListImages has no image %s", id)
	}
	for call, img := range answers {
		if !slices.Equal(img.RepoTags, wantTags) || !slices.Equal(img.RepoDigests, wantDigests) {
			t.Errorf("%s: repo_tags %q repo_digests %q, want %q and %q", call, img.RepoTags, img.RepoDigests, wantTags, wantDigests)
		}
		for _, tag := range img.RepoTags {
			if strings.Contains(tag, "@") {
				t.Errorf("%s: digest reference %q among repo_tags", call, tag)
			}
		}
	}
	// What Docker itself says, for the record of a failure.
	if t.Failed() {
		raw, err := suite.docker.ImageInspect(ctx, id)
		t.Logf("docker inspect: RepoTags %q RepoDigests %q (%v)", raw.RepoTags, raw.RepoDigests, err)
	}

	// The kubelet's image GC removes the image by one name: every name goes, digest names too.
	if _, err := d.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: repo + ":1"}}); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	for _, ref := range append([]string{id}, pulls...) {
		if st, err := d.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil || st.Image != nil {
			t.Errorf("after RemoveImage, ImageStatus(%s) = %v, %v", ref, st.GetImage(), err)
		}
	}
}
