package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestBadInputIsRefusedWithACode(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	withName := func(name string) *runtimeapi.PodSandboxConfig {
		c := sandboxConfig("x")
		c.Metadata.Name = name
		return c
	}
	noImage := containerConfig("c")
	noImage.Image = nil
	relMount := containerConfig("c")
	relMount.Mounts = []*runtimeapi.Mount{{HostPath: "/tmp", ContainerPath: "tmp"}}
	badCtrName := containerConfig("c")
	badCtrName.Metadata.Name = "a_b"

	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"RunPodSandbox nil config", func() error { _, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{}); return err }, codes.InvalidArgument},
		{"RunPodSandbox no metadata", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox empty name", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: withName("")})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox name with delimiter", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: withName("a_b")})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox 300 character name", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: withName(strings.Repeat("a", 300))})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox slash in name", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: withName("../x")})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox absurd handler", func() error {
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("h"), RuntimeHandler: strings.Repeat("x", 100)})
			return err
		}, codes.InvalidArgument},
		{"StopPodSandbox empty id", func() error { _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{}); return err }, codes.InvalidArgument},
		{"RemovePodSandbox empty id", func() error { _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{}); return err }, codes.InvalidArgument},
		{"PodSandboxStatus empty id", func() error { _, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{}); return err }, codes.InvalidArgument},
		{"PodSandboxStatus unknown id", func() error {
			_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})
			return err
		}, codes.NotFound},
		{"CreateContainer empty pod id", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{Config: containerConfig("c"), SandboxConfig: podCfg})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer nil config", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: podCfg})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer no sandbox config", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("c")})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer no image", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: noImage, SandboxConfig: podCfg})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer relative mount", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: relMount, SandboxConfig: podCfg})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer bad name", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: badCtrName, SandboxConfig: podCfg})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer unknown pod", func() error {
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: "nope", Config: containerConfig("c"), SandboxConfig: podCfg})
			return err
		}, codes.NotFound},
		{"CreateContainer in a container id", func() error {
			id := createContainer(t, s, podID, podCfg, "inner")
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: containerConfig("c"), SandboxConfig: podCfg})
			return err
		}, codes.NotFound},
		{"StartContainer empty id", func() error { _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{}); return err }, codes.InvalidArgument},
		{"StartContainer unknown id", func() error {
			_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: "nope"})
			return err
		}, codes.NotFound},
		{"StopContainer empty id", func() error { _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{}); return err }, codes.InvalidArgument},
		{"StopContainer negative timeout", func() error {
			_, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "x", Timeout: -1})
			return err
		}, codes.InvalidArgument},
		{"RemoveContainer empty id", func() error { _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{}); return err }, codes.InvalidArgument},
		{"ContainerStatus empty id", func() error { _, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{}); return err }, codes.InvalidArgument},
		{"ContainerStatus of a sandbox", func() error {
			_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: podID})
			return err
		}, codes.NotFound},
		{"ImageStatus nil", func() error { _, err := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{}); return err }, codes.InvalidArgument},
		{"PullImage nil", func() error { _, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{}); return err }, codes.InvalidArgument},
		{"RemoveImage nil", func() error { _, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{}); return err }, codes.InvalidArgument},
		// Idempotent removal and stop: unknown ids are a success.
		{"StopPodSandbox unknown", func() error {
			_, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "nope"})
			return err
		}, codes.OK},
		{"RemovePodSandbox unknown", func() error {
			_, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "nope"})
			return err
		}, codes.OK},
		{"StopContainer unknown", func() error {
			_, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "nope"})
			return err
		}, codes.OK},
		{"RemoveContainer unknown", func() error {
			_, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "nope"})
			return err
		}, codes.OK},
		{"RemoveImage unknown", func() error {
			_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: strings.Repeat("0", 64)}})
			return err
		}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, err, tc.code)
			if err != nil && len(err.Error()) < 20 {
				t.Errorf("message %q does not say much", err)
			}
		})
	}
	if n := len(fake.Containers()); n != 2 { // the pod and "inner"
		t.Errorf("bad input left %d containers, want 2", n)
	}
}

func TestPanicBecomesInternalErrorForThatCallOnly(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	intercept := RecoverUnary(s.log)
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/Boom"}
	_, err := intercept(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	wantCode(t, err, codes.Internal)
	resp, err := intercept(context.Background(), &runtimeapi.VersionRequest{}, info, func(ctx context.Context, req any) (any, error) {
		return s.Version(ctx, req.(*runtimeapi.VersionRequest))
	})
	if err != nil || resp.(*runtimeapi.VersionResponse).RuntimeName != "docker" {
		t.Errorf("next call after a panic: %v, %v", resp, err)
	}
}
