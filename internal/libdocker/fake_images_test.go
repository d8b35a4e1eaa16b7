package libdocker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
)

func TestInspectImage(t *testing.T) {
	f := newTestFake(t)
	for _, ref := range []string{"busybox", "busybox:latest", "docker.io/library/busybox:latest", busyboxID, "1111111111"} {
		img, err := f.InspectImage(context.Background(), ref)
		if err != nil || img.ID != busyboxID || img.Config.User != "nobody" {
			t.Errorf("%s: %v %+v", ref, err, img)
		}
	}
	for _, ref := range []string{"busybox:2", "alpine", "sha256:2222222222222222222222222222222222222222222222222222222222222222"} {
		if _, err := f.InspectImage(context.Background(), ref); !IsNotFound(err) {
			t.Errorf("%s: err = %v, want not found", ref, err)
		}
	}
}

func TestRemoveImage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		tags      []string
		container string // "", "running", "stopped"
		ref       string
		force     bool
		check     func(error) bool
		imageLeft bool
	}{
		{"untag one of two keeps image", []string{"busybox", "mybox:1"}, "", "mybox:1", false, nil, true},
		{"untag last tag removes image", []string{"busybox"}, "", "busybox", false, nil, false},
		{"by ID with one tag removes image", []string{"busybox"}, "", busyboxID, false, nil, false},
		{"by ID with two tags conflicts", []string{"busybox", "mybox:1"}, "", busyboxID, false, IsConflict, true},
		{"by ID with two tags forced", []string{"busybox", "mybox:1"}, "", busyboxID, true, nil, false},
		{"by ID used by stopped container", []string{"busybox"}, "stopped", busyboxID, false, IsConflict, true},
		{"by ID used by stopped container forced", []string{"busybox"}, "stopped", busyboxID, true, nil, false},
		{"by ID used by running container even forced", []string{"busybox"}, "running", busyboxID, true, IsConflict, true},
		{"last tag in use must force", []string{"busybox"}, "stopped", "busybox", false, IsConflict, true},
		{"unknown", []string{"busybox"}, "", "alpine", false, IsNotFound, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			f.AddImage(FakeImage(busyboxID, "", tc.tags...))
			if tc.container != "" {
				mustCreate(t, f, "c1", nil, "")
				if tc.container == "running" {
					_ = f.StartContainer(ctx, "c1")
				}
			}
			_, err := f.RemoveImage(ctx, tc.ref, image.RemoveOptions{Force: tc.force})
			if tc.check == nil && err != nil || tc.check != nil && !tc.check(err) {
				t.Fatalf("unexpected err: %v", err)
			}
			f.mu.Lock()
			_, left := f.images[busyboxID]
			f.mu.Unlock()
			if left != tc.imageLeft {
				t.Errorf("image left = %v, want %v", left, tc.imageLeft)
			}
		})
	}
}

func TestPullImage(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.AddPullable("registry.k8s.io/pause:3.9", FakeImage("", "", "ignored"))
	auth := registry.AuthConfig{Username: "u", Password: "p"}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, time.Minute); err != nil {
		t.Fatal(err)
	}
	if f.LastPullAuth() != auth {
		t.Errorf("auth not recorded: %+v", f.LastPullAuth())
	}
	img, err := f.InspectImage(ctx, "registry.k8s.io/pause:3.9")
	if err != nil || len(img.RepoTags) != 1 || img.RepoTags[0] != "registry.k8s.io/pause:3.9" {
		t.Fatalf("pulled image: %v %+v", err, img)
	}
	// A registry's manifest digest, recorded under the repository, the same at every pull.
	if len(img.RepoDigests) != 1 || !strings.HasPrefix(img.RepoDigests[0], "registry.k8s.io/pause@sha256:") {
		t.Errorf("pulled image's RepoDigests %v, want one registry.k8s.io/pause@sha256:...", img.RepoDigests)
	}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, 0); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.InspectImage(ctx, "registry.k8s.io/pause:3.9"); again.ID != img.ID || !slices.Equal(again.RepoDigests, img.RepoDigests) {
		t.Errorf("pulled again: %s %v, want %s %v", again.ID, again.RepoDigests, img.ID, img.RepoDigests)
	}
	imported, _ := f.InspectImage(ctx, f.AddImage(FakeImage("", "", "local/built:1")))
	if len(imported.RepoDigests) != 0 {
		t.Errorf("an image never pulled has RepoDigests %v", imported.RepoDigests)
	}
	for _, tc := range []struct{ ref, text string }{
		{"registry.k8s.io/pause:9.9", "manifest unknown"},
		{"nosuch/image", "pull access denied"},
	} {
		if err := f.PullImage(ctx, tc.ref, registry.AuthConfig{}, 0); !IsNotFound(err) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: err = %v", tc.ref, err)
		}
	}

	f.SetPullDelay(time.Hour)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := f.PullImage(cctx, "registry.k8s.io/pause:3.9", auth, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled pull: %v", err)
	}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, 10*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "no pull progress") {
		t.Errorf("stalled pull: %v", err)
	}
}

func TestDiskUsage(t *testing.T) {
	f := newTestFake(t)
	mustCreate(t, f, "c1", nil, "")
	du, err := f.DiskUsage(context.Background(), types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject}})
	if err != nil || len(du.Images) != 1 || du.Images[0].Size != 5<<20 || du.Images[0].Containers != 1 || du.Containers != nil {
		t.Errorf("du = %+v, %v", du, err)
	}
}
