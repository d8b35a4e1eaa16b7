package libdocker

import (
	"context"
	"slices"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
)

const storeTestDigest = "sha256:d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1"

// What each store answers after pulls of one image by tag, by digest and by digest from a
// second repository (moby's classic reference store, and daemon/containerd's list and inspect).
func TestFakeImageStoresNameAPulledImageAsDockerDoes(t *testing.T) {
	for _, tc := range []struct {
		store                  string
		wantID                 string
		wantTags               []string
		inspectDigests         []string
		listDigests            []string
		driver, driverTypeWant string
	}{
		{
			store: "overlay2", wantID: busyboxID,
			wantTags:       []string{"example.com/app:1"},
			inspectDigests: []string{"example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest},
			listDigests:    []string{"example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest},
			driver:         "overlay2",
		},
		{
			store: "containerd", wantID: storeTestDigest,
			wantTags:       []string{"example.com/app:1", "example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest},
			inspectDigests: []string{"example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest},
			listDigests:    []string{"example.com/mirror@" + storeTestDigest}, // one name's: the last by full name
			driver:         "overlayfs", driverTypeWant: "io.containerd.snapshotter.v1",
		},
	} {
		t.Run(tc.store, func(t *testing.T) {
			f := NewFake()
			f.SetContainerdImageStore(tc.store == "containerd")
			ctx := context.Background()
			img := FakeImage(busyboxID, "", "")
			img.RepoTags, img.RepoDigests = nil, []string{"example.com/app@" + storeTestDigest} // the registry's manifest digest
			for _, ref := range []string{"example.com/app:1", "example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest} {
				f.AddPullable(ref, img)
				if err := f.PullImage(ctx, ref, registry.AuthConfig{}, 0); err != nil {
					t.Fatalf("pull %s: %v", ref, err)
				}
			}
			got, err := f.InspectImage(ctx, "example.com/mirror@"+storeTestDigest)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.wantID || !slices.Equal(got.RepoTags, tc.wantTags) || !slices.Equal(got.RepoDigests, tc.inspectDigests) {
				t.Errorf("inspect: ID %s RepoTags %q RepoDigests %q, want %s %q %q", got.ID, got.RepoTags, got.RepoDigests, tc.wantID, tc.wantTags, tc.inspectDigests)
			}
			list, err := f.ListImages(ctx, image.ListOptions{})
			if err != nil || len(list) != 1 {
				t.Fatalf("list: %v, %v", list, err)
			}
			if l := list[0]; l.ID != tc.wantID || !slices.Equal(l.RepoTags, tc.wantTags) || !slices.Equal(l.RepoDigests, tc.listDigests) {
				t.Errorf("list: ID %s RepoTags %q RepoDigests %q, want %s %q %q", l.ID, l.RepoTags, l.RepoDigests, tc.wantID, tc.wantTags, tc.listDigests)
			}
			if _, err := f.InspectImage(ctx, "example.com/other@"+storeTestDigest); !cerrdefs.IsNotFound(err) {
				t.Errorf("a digest of a repository the image has no name in: %v", err)
			}
			info, _ := f.Info(ctx)
			driverType := ""
			for _, kv := range info.DriverStatus {
				if kv[0] == "driver-type" {
					driverType = kv[1]
				}
			}
			if info.Driver != tc.driver || driverType != tc.driverTypeWant {
				t.Errorf("info: Driver %q DriverStatus %q", info.Driver, info.DriverStatus)
			}

			// Untagging the digest names leaves the tag.
			for _, ref := range []string{"example.com/app@" + storeTestDigest, "example.com/mirror@" + storeTestDigest} {
				if _, err := f.RemoveImage(ctx, ref, image.RemoveOptions{}); err != nil {
					t.Fatalf("remove %s: %v", ref, err)
				}
			}
			if got, err := f.InspectImage(ctx, "example.com/app:1"); err != nil || !slices.Equal(got.RepoTags, []string{"example.com/app:1"}) {
				t.Errorf("after untagging the digests: %v, %v", got, err)
			}
		})
	}
}
