package core

import (
	"context"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

const (
	refsDigest      = "sha256:d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1"
	otherRefsDigest = "sha256:e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2"
)

// TestImageNamesAgreeAcrossCallsOnBothStores pulls images by tag and by digest, as the kubelet
// does, and asks ListImages (all, and filtered) and ImageStatus (by each name) about them: on
// both stores every call gives the same repo_tags, without digest references, and the same
// repo_digests, although the containerd store lists REPO@DIGEST among its RepoTags and its list
// reports fewer RepoDigests than its inspect.
func TestImageNamesAgreeAcrossCallsOnBothStores(t *testing.T) {
	type want struct{ tags, digests []string }
	for _, store := range []string{"overlay2", "containerd"} {
		for _, tc := range []struct {
			name  string
			pulls []string
			want  want
		}{
			{"by tag", []string{"example.com/app:1"},
				want{[]string{"example.com/app:1"}, []string{"example.com/app@" + refsDigest}}},
			{"by digest", []string{"example.com/app@" + refsDigest},
				want{[]string{}, []string{"example.com/app@" + refsDigest}}},
			{"by tag, then by digest from two repositories", []string{"example.com/app:1", "example.com/app@" + refsDigest, "mirror.example.org/app@" + refsDigest},
				want{[]string{"example.com/app:1"}, []string{"example.com/app@" + refsDigest, "mirror.example.org/app@" + refsDigest}}},
			{"two tags in two repositories", []string{"example.com/app:1", "example.com/other:2"},
				want{[]string{"example.com/app:1", "example.com/other:2"}, []string{"example.com/app@" + refsDigest, "example.com/other@" + refsDigest}}},
			{"two tags in two repositories, a digest", []string{"example.com/app:1", "example.com/other:2", "example.com/app@" + refsDigest},
				want{[]string{"example.com/app:1", "example.com/other:2"}, []string{"example.com/app@" + refsDigest, "example.com/other@" + refsDigest}}},
		} {
			t.Run(store+"/"+tc.name, func(t *testing.T) {
				fake := libdocker.NewFake()
				fake.SetContainerdImageStore(store == "containerd")
				img := libdocker.FakeImage("", "", "")
				img.RepoTags, img.RepoDigests = nil, []string{"example.com/app@" + refsDigest} // the manifest the registries serve
				for _, ref := range tc.pulls {
					fake.AddPullable(ref, img)
				}
				s := newTestService(t, fake, Options{})
				ctx := context.Background()
				var id string
				for _, ref := range tc.pulls {
					resp, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
					if err != nil {
						t.Fatalf("pull %s: %v", ref, err)
					}
					if id != "" && resp.ImageRef != id {
						t.Fatalf("pull %s: image %s, want the same image %s", ref, resp.ImageRef, id)
					}
					id = resp.ImageRef
				}

				answers := map[string]*runtimeapi.Image{}
				list, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{})
				if err != nil {
					t.Fatal(err)
				}
				for _, img := range list.Images { // beside the test service's busybox and pause
					if img.Id == id {
						answers["ListImages"] = img
					}
				}
				if answers["ListImages"] == nil {
					t.Fatalf("ListImages has no %s: %v", id, list)
				}
				for _, ref := range append([]string{id}, tc.pulls...) {
					st, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
					if err != nil || st.Image == nil {
						t.Fatalf("ImageStatus(%s) = %v, %v", ref, st, err)
					}
					answers["ImageStatus "+ref] = st.Image
					filtered, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: ref}}})
					if err != nil || len(filtered.Images) != 1 {
						t.Fatalf("ListImages(%s) = %v, %v", ref, filtered, err)
					}
					answers["ListImages "+ref] = filtered.Images[0]
				}
				for call, got := range answers {
					if got.Id != id || !slices.Equal(got.RepoTags, tc.want.tags) || !slices.Equal(got.RepoDigests, tc.want.digests) {
						t.Errorf("%s: id %s repo_tags %q repo_digests %q, want %s %q %q", call, got.Id, got.RepoTags, got.RepoDigests, id, tc.want.tags, tc.want.digests)
					}
					for _, tag := range got.RepoTags {
						if strings.Contains(tag, "@") {
							t.Errorf("%s: digest reference %q among repo_tags", call, tag)
						}
					}
				}
			})
		}
	}
}

// What each store's list and inspect calls answer, as Docker 20.10 (classic) and Docker 29
// (containerd store) do, and what the CRI reports from it.
func TestCRIImageRefs(t *testing.T) {
	for _, tc := range []struct {
		name             string
		id               string
		tags, digests    []string
		containerd       bool
		wantTags, wantDs []string
	}{
		{name: "classic: tags and digests as they are, digests sorted",
			id: otherRefsDigest, tags: []string{"b/app:1", "a/app:2"}, digests: []string{"b/app@" + refsDigest, "a/app@" + refsDigest},
			wantTags: []string{"b/app:1", "a/app:2"}, wantDs: []string{"a/app@" + refsDigest, "b/app@" + refsDigest}},
		{name: "classic: placeholders dropped",
			id: otherRefsDigest, tags: []string{"<none>:<none>"}, digests: []string{"<none>@<none>"},
			wantTags: []string{}, wantDs: []string{}},
		{name: "classic: no repo digest is made up for a local image",
			id: otherRefsDigest, tags: []string{"local/app:1"}, digests: nil,
			wantTags: []string{"local/app:1"}, wantDs: []string{}},
		{name: "containerd inspect: a digest name among RepoTags moves to the digests",
			id: refsDigest, containerd: true,
			tags: []string{"app:1", "app@" + refsDigest, "mirror.example.org/app@" + refsDigest}, digests: []string{"app@" + refsDigest, "mirror.example.org/app@" + refsDigest},
			wantTags: []string{"app:1"}, wantDs: []string{"app@" + refsDigest, "mirror.example.org/app@" + refsDigest}},
		{name: "containerd list: one name's digest only; the others come from the names",
			id: refsDigest, containerd: true,
			tags: []string{"app:1", "app@" + refsDigest, "mirror.example.org/app@" + refsDigest}, digests: []string{"mirror.example.org/app@" + refsDigest},
			wantTags: []string{"app:1"}, wantDs: []string{"app@" + refsDigest, "mirror.example.org/app@" + refsDigest}},
		{name: "containerd: a tagged digest name is a repo digest",
			id: refsDigest, containerd: true, tags: []string{"app:1@" + refsDigest}, digests: []string{"app@" + refsDigest},
			wantTags: []string{}, wantDs: []string{"app@" + refsDigest}},
		{name: "containerd list: a bare target (no platform held) is no repo digest",
			id: refsDigest, containerd: true, tags: []string{"app:1"}, digests: []string{refsDigest},
			wantTags: []string{"app:1"}, wantDs: []string{"app@" + refsDigest}},
		{name: "a malformed name stays a tag, as Docker lists it; duplicates go",
			id: otherRefsDigest, tags: []string{"Bad Name", "app:1", "app:1"}, digests: []string{"app@" + refsDigest, "app@" + refsDigest},
			wantTags: []string{"Bad Name", "app:1"}, wantDs: []string{"app@" + refsDigest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags, digests := criImageRefs(tc.id, tc.tags, tc.digests, tc.containerd)
			if !slices.Equal(tags, tc.wantTags) || !slices.Equal(digests, tc.wantDs) {
				t.Errorf("repo_tags %q repo_digests %q, want %q %q", tags, digests, tc.wantTags, tc.wantDs)
			}
		})
	}
}
