package core

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/registry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestImageIdentifiersAgreeAcrossAPIs(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("example.com/app:1", libdocker.FakeImage("", "1002", "example.com/app:1"))
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	auth := &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: "example.com"}
	pulled, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:1"}, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.LastPullAuth(); got != (registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "example.com"}) {
		t.Errorf("auth reaching Docker: %+v", got)
	}
	st, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:1"}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus = %v, %v", st, err)
	}
	if st.Image.Id != pulled.ImageRef || st.Image.Uid.GetValue() != 1002 || st.Image.Username != "" {
		t.Errorf("image %v, pulled ref %q", st.Image, pulled.ImageRef)
	}
	podID, podCfg := runPod(t, s, "p", "")
	cfg := containerConfig("c")
	cfg.Image = &runtimeapi.ImageSpec{Image: pulled.ImageRef, UserSpecifiedImage: "example.com/app:1"}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: resp.ContainerId})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status.ImageId != pulled.ImageRef || cs.Status.Image.Image != "example.com/app:1" {
		t.Errorf("container image_id %q image %q", cs.Status.ImageId, cs.Status.Image.Image)
	}
	list, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: resp.ContainerId}})
	if len(list.Containers) != 1 || list.Containers[0].ImageId != pulled.ImageRef {
		t.Errorf("listed container %v", list.Containers)
	}
}

func TestImageUserFields(t *testing.T) {
	fake := libdocker.NewFake()
	for _, tc := range []struct {
		user     string
		uid      int64
		username string
	}{{"1002", 1002, ""}, {"www-data", 0, "www-data"}, {"1003:1003", 1003, ""}, {"www-data:staff", 0, "www-data"}} {
		fake.AddImage(libdocker.FakeImage("", tc.user, "u/"+tc.username+tc.user[:1]+":x"))
		s := newTestService(t, fake, Options{})
		st, err := s.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "u/" + tc.username + tc.user[:1] + ":x"}})
		if err != nil || st.Image == nil {
			t.Fatalf("%s: %v %v", tc.user, st, err)
		}
		if st.Image.Uid.GetValue() != tc.uid || st.Image.Username != tc.username {
			t.Errorf("USER %q: uid %v username %q", tc.user, st.Image.Uid, st.Image.Username)
		}
	}
}

// The pod infra image is pinned (the kubelet's image garbage collection keeps it); no other
// image is.
func TestOnlyThePauseImageIsPinned(t *testing.T) {
	s := newTestService(t, libdocker.NewFake(), Options{})
	list, err := s.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, img := range list.Images {
		for _, tag := range img.RepoTags {
			pinned[tag] = img.Pinned
		}
	}
	if len(pinned) != 2 || !pinned[testPauseImage] || pinned[testImage] {
		t.Errorf("pinned by tag %v, want %s alone of %s and %s", pinned, testPauseImage, testPauseImage, testImage)
	}
}

// PullImage and RemoveImage fail when Docker does: an image the registry does not have, an
// image Docker cannot remove.
func TestPullAndRemoveImageFailWhenDockerFails(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	if resp, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/missing:1"}}); err == nil {
		t.Errorf("PullImage of an image the registry lacks = %v, want an error", resp)
	}
	id := fake.AddImage(libdocker.FakeImage("", "")) // untagged: removed by its ID alone
	fake.InjectError("RemoveImage", errors.New("unrecognized image ID"))
	if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err == nil {
		t.Error("RemoveImage succeeded although Docker failed to remove the image")
	}
	if resp, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err != nil || resp == nil {
		t.Errorf("RemoveImage = %v, %v; want it removed", resp, err)
	}
	if _, err := fake.InspectImage(ctx, id); !libdocker.IsNotFound(err) {
		t.Errorf("the image is still there (%v)", err)
	}
}
