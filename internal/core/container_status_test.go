package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// The kubelet copies ContainerStatus.image_ref into the pod's imageID: it must be upstream's
// docker-pullable://REPO@DIGEST, or docker://ID without a digest, while image_id and the
// listed container's image_ref stay Docker's image ID.
func TestContainerStatusImageRefIsUpstreamsPullableForm(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("example.com/app:1", libdocker.FakeImage("", "", "example.com/app:1"))
	goneID := fake.AddImage(libdocker.FakeImage("", "", "example.com/gone:1"))
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	pulled, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:1"}})
	if err != nil {
		t.Fatal(err)
	}
	pulledImg, err := fake.InspectImage(ctx, pulled.ImageRef)
	if err != nil || len(pulledImg.RepoDigests) != 1 || !strings.HasPrefix(pulledImg.RepoDigests[0], "example.com/app@sha256:") {
		t.Fatalf("pulled image %+v, %v: want one repo digest of example.com/app", pulledImg, err)
	}
	importedImg, err := fake.InspectImage(ctx, testImage)
	if err != nil || len(importedImg.RepoDigests) != 0 {
		t.Fatalf("imported image %+v, %v: want no repo digest", importedImg, err)
	}

	podID, podCfg := runPod(t, s, "p", "")
	create := func(name, image string) string {
		t.Helper()
		cfg := containerConfig(name)
		cfg.Image = &runtimeapi.ImageSpec{Image: image}
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerId
	}
	fromRegistry := create("pulled", pulled.ImageRef)
	imported := create("imported", testImage)
	gone := create("gone", "example.com/gone:1")
	if _, err := fake.RemoveImage(ctx, goneID, image.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, id, imageID, wantRef string
		inspectImageErr            error
	}{
		{"pulled from a registry", fromRegistry, pulledImg.ID, "docker-pullable://" + pulledImg.RepoDigests[0], nil},
		{"imported", imported, importedImg.ID, "docker://" + importedImg.ID, nil},
		{"image removed", gone, goneID, "docker://" + goneID, nil},
		// A status without the digest beats no status at all.
		{"image inspect fails", fromRegistry, pulledImg.ID, "docker://" + pulledImg.ID, errors.New("connection reset by peer")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.inspectImageErr != nil {
				fake.InjectError("InspectImage", tc.inspectImageErr)
			}
			resp, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: tc.id})
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.Status; st.ImageRef != tc.wantRef || st.ImageId != tc.imageID {
				t.Errorf("image_ref %q image_id %q, want %q and %q", st.ImageRef, st.ImageId, tc.wantRef, tc.imageID)
			}
			list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: tc.id}})
			if err != nil || len(list.Containers) != 1 {
				t.Fatalf("ListContainers = %v, %v", list, err)
			}
			if c := list.Containers[0]; c.ImageRef != tc.imageID || c.ImageId != tc.imageID {
				t.Errorf("listed image_ref %q image_id %q, want the image ID %q for both (image GC)", c.ImageRef, c.ImageId, tc.imageID)
			}
		})
	}
}

// ContainerStatus reports the container's bind mounts, with their propagation; Docker's
// volumes and tmpfs mounts are not the CRI's mounts and are left out.
func TestContainerStatusMountsAreTheBindMounts(t *testing.T) {
	got := criMounts([]container.MountPoint{
		{Type: mount.TypeBind, Source: "/var/lib/kubelet/pods/x/volumes/cfg", Destination: "/etc/cfg", RW: false, Propagation: mount.PropagationRSlave},
		{Type: mount.TypeVolume, Name: "anon", Source: "/var/lib/docker/volumes/anon/_data", Destination: "/data", RW: true},
		{Type: mount.TypeTmpfs, Destination: "/run"},
		{Type: mount.TypeBind, Source: "/mnt/shared", Destination: "/shared", RW: true, Propagation: mount.PropagationRShared},
	})
	want := []*runtimeapi.Mount{
		{ContainerPath: "/etc/cfg", HostPath: "/var/lib/kubelet/pods/x/volumes/cfg", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{ContainerPath: "/shared", HostPath: "/mnt/shared", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
	}
	if len(got) != len(want) {
		t.Fatalf("mounts %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("mount %d = %v, want %v", i, got[i], want[i])
		}
	}
}
