package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// An image call's runtime_handler is checked as RunPodSandbox checks a pod's: an unknown one
// fails with the same error before Docker is asked; a known one (or an alias) sees the one
// image store Docker has.
func TestImageRuntimeHandler(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("example.com/app:1", libdocker.FakeImage("", "", "example.com/app:1"))
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"vm": "kata"}})
	ctx := context.Background()
	spec := func(image, handler string) *runtimeapi.ImageSpec {
		return &runtimeapi.ImageSpec{Image: image, RuntimeHandler: handler}
	}
	calls := map[string]func(handler string) error{
		"PullImage": func(h string) error {
			_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec("example.com/app:1", h)})
			return err
		},
		"ImageStatus": func(h string) error {
			resp, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec("example.com/app:1", h)})
			if err == nil && resp.Image == nil {
				t.Errorf("ImageStatus with handler %q: no image", h)
			}
			return err
		},
		"ListImages": func(h string) error {
			resp, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: spec("", h)}})
			if err == nil && len(resp.Images) < 2 {
				t.Errorf("ListImages with handler %q: %d images, want all of Docker's", h, len(resp.Images))
			}
			return err
		},
	}
	_, wantErr := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: "nosuch"})
	if status.Code(wantErr) != codes.InvalidArgument {
		t.Fatalf("RunPodSandbox with handler nosuch: %v", wantErr)
	}
	for _, name := range []string{"PullImage", "ImageStatus", "ListImages"} {
		for _, h := range []string{"", "kata", "vm"} {
			if err := calls[name](h); err != nil {
				t.Errorf("%s with handler %q: %v", name, h, err)
			}
		}
		before := fake.Calls("PullImage") + fake.Calls("InspectImage") + fake.Calls("ListImages")
		err := calls[name]("nosuch")
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != status.Convert(wantErr).Message() {
			t.Errorf("%s with handler nosuch: %v, want RunPodSandbox's %v", name, err, wantErr)
		}
		if after := fake.Calls("PullImage") + fake.Calls("InspectImage") + fake.Calls("ListImages"); after != before {
			t.Errorf("%s with handler nosuch called Docker's images %d times", name, after-before)
		}
	}
	_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec("example.com/app:1", "nosuch")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("RemoveImage with handler nosuch: %v", err)
	}
	if _, err := fake.InspectImage(ctx, "example.com/app:1"); err != nil {
		t.Errorf("RemoveImage with an unknown handler removed the image: %v", err)
	}
	if _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec("example.com/app:1", "vm")}); err != nil {
		t.Errorf("RemoveImage with handler vm: %v", err)
	}
	if _, err := fake.InspectImage(ctx, "example.com/app:1"); !libdocker.IsNotFound(err) {
		t.Errorf("image still there after RemoveImage with handler vm: %v", err)
	}
}
