//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// rpc binds a CRI call to its request, so that a table row is one line.
func rpc[Req, Resp any](ctx context.Context, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) func() error {
	return func() error {
		_, err := call(ctx, req)
		return err
	}
}

func TestStopAndRemoveAreIdempotent(t *testing.T) {
	d := StartDaemon(t)
	unknown := strings.Repeat("0123456789abcdef", 4)
	podCfg := newPodConfig(t, "idem")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	startContainer(t, d, ctrID)
	r, ctx := d.Runtime, t.Context()
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"StopContainer unknown", rpc(ctx, r.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: unknown, Timeout: 1})},
		{"RemoveContainer unknown", rpc(ctx, r.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: unknown})},
		{"StopPodSandbox unknown", rpc(ctx, r.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: unknown})},
		{"RemovePodSandbox unknown", rpc(ctx, r.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown})},
		{"StopContainer", rpc(ctx, r.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 1})},
		{"StopContainer again", rpc(ctx, r.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 1})},
		{"StopPodSandbox", rpc(ctx, r.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID})},
		{"StopPodSandbox again", rpc(ctx, r.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID})},
		{"RemoveContainer", rpc(ctx, r.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID})},
		{"RemoveContainer again", rpc(ctx, r.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID})},
		{"RemovePodSandbox", rpc(ctx, r.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID})},
		{"RemovePodSandbox again", rpc(ctx, r.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID})},
	} {
		if err := step.call(); err != nil {
			t.Errorf("%s: %v, want success", step.name, err)
		}
	}
	if left := podContainers(t, podCfg.Metadata); len(left) != 0 {
		t.Errorf("%d Docker containers left after RemovePodSandbox", len(left))
	}
}

func TestBadInputIsRejectedAndDaemonKeepsServing(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "badinput")
	sandboxID := runPod(t, d, podCfg, "")
	unknown := strings.Repeat("fedcba9876543210", 4)
	pod := func(name string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: podCfg.Metadata.Namespace, Uid: podCfg.Metadata.Uid}}
	}
	noMetadata := containerConfig("c", "true")
	noMetadata.Metadata = nil
	r, im, ctx := d.Runtime, d.Images, t.Context()
	run := func(cfg *runtimeapi.PodSandboxConfig) func() error {
		return rpc(ctx, r.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	}
	create := func(sandboxID string, cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig) func() error {
		return rpc(ctx, r.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
	}
	for _, tc := range []struct {
		name string
		code codes.Code
		call func() error
	}{
		{"RunPodSandbox nil config", codes.InvalidArgument, run(nil)},
		{"RunPodSandbox no metadata", codes.InvalidArgument, run(&runtimeapi.PodSandboxConfig{})},
		{"RunPodSandbox name with _", codes.InvalidArgument, run(pod("bad_name"))},
		{"RunPodSandbox 300-character name", codes.InvalidArgument, run(pod(strings.Repeat("a", 300)))},
		{"RunPodSandbox empty name", codes.InvalidArgument, run(pod(""))},
		{"CreateContainer empty sandbox id", codes.InvalidArgument, create("", containerConfig("c", "true"), podCfg)},
		{"CreateContainer nil config", codes.InvalidArgument, create(sandboxID, nil, podCfg)},
		{"CreateContainer no metadata", codes.InvalidArgument, create(sandboxID, noMetadata, podCfg)},
		{"CreateContainer nil sandbox config", codes.InvalidArgument, create(sandboxID, containerConfig("c", "true"), nil)},
		{"CreateContainer name with _", codes.InvalidArgument, create(sandboxID, containerConfig("bad_name", "true"), podCfg)},
		{"CreateContainer 300-character name", codes.InvalidArgument, create(sandboxID, containerConfig(strings.Repeat("c", 300), "true"), podCfg)},
		{"CreateContainer unknown sandbox", codes.NotFound, create(unknown, containerConfig("c", "true"), podCfg)},
		{"StopContainer empty id", codes.InvalidArgument, rpc(ctx, r.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: "", Timeout: 1})},
		{"RemoveContainer empty id", codes.InvalidArgument, rpc(ctx, r.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: ""})},
		{"StopPodSandbox empty id", codes.InvalidArgument, rpc(ctx, r.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ""})},
		{"RemovePodSandbox empty id", codes.InvalidArgument, rpc(ctx, r.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ""})},
		{"StartContainer empty id", codes.InvalidArgument, rpc(ctx, r.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: ""})},
		{"StartContainer unknown", codes.NotFound, rpc(ctx, r.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: unknown})},
		{"ContainerStatus empty id", codes.InvalidArgument, rpc(ctx, r.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: ""})},
		{"ContainerStatus unknown", codes.NotFound, rpc(ctx, r.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: unknown})},
		{"ContainerStatus of a sandbox", codes.NotFound, rpc(ctx, r.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: sandboxID})},
		{"PodSandboxStatus empty id", codes.InvalidArgument, rpc(ctx, r.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: ""})},
		{"PodSandboxStatus unknown", codes.NotFound, rpc(ctx, r.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: unknown})},
		{"ImageStatus nil image", codes.InvalidArgument, rpc(ctx, im.ImageStatus, &runtimeapi.ImageStatusRequest{})},
		{"PullImage nil image", codes.InvalidArgument, rpc(ctx, im.PullImage, &runtimeapi.PullImageRequest{})},
		{"RemoveImage nil image", codes.InvalidArgument, rpc(ctx, im.RemoveImage, &runtimeapi.RemoveImageRequest{})},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: got %v, want code %v", tc.name, err, tc.code)
		}
	}
	if _, err := r.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version after bad input: %v", err)
	}
	// Every bad pod and container above used this pod's namespace.
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "_"+podCfg.Metadata.Namespace+"_"))})
	if err != nil || len(list) != 1 || list[0].ID != sandboxID {
		t.Errorf("Docker has %d containers in the test's namespace (%v), want only the sandbox", len(list), err)
	}
}
