package core

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

func TestUpdateContainerResourcesAppliesLive(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "resize", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}

	// Memory above Docker's default swap (2 x 64 MiB), swap unspecified: the swap allowance moves up.
	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 1024, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20, CpusetCpus: "0-1",
		OomScoreAdj: 100, Unified: map[string]string{"pids.max": "64"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(ctx, id)
	hc := c.HostConfig
	if hc.CPUShares != 1024 || hc.CPUQuota != 50000 || hc.Memory != 256<<20 || hc.MemorySwap != (256+64)<<20 || hc.CpusetCpus != "0-1" || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("after update: %+v", hc.Resources)
	}

	// The kubelet's swap limit (no swap: memory+swap = memory) is taken as given.
	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, MemorySwapLimitInBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ = fake.InspectContainer(ctx, id)
	if c.HostConfig.Memory != 128<<20 || c.HostConfig.MemorySwap != 128<<20 || c.HostConfig.CPUShares != 1024 {
		t.Errorf("after second update: %+v", c.HostConfig.Resources)
	}

	// Then memory alone: still no swap, as Docker would refuse a limit above memory+swap.
	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ = fake.InspectContainer(ctx, id)
	if c.HostConfig.Memory != 512<<20 || c.HostConfig.MemorySwap != 512<<20 {
		t.Errorf("after a memory-only update: %+v", c.HostConfig.Resources)
	}

	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "0123456789ab", Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
	wantCode(t, err, codes.NotFound)
	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Windows: &runtimeapi.WindowsContainerResources{}})
	wantCode(t, err, codes.Unimplemented)
	if _, err := s.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("UpdatePodSandboxResources: %v", err)
	}
}
