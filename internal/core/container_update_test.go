package core

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
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

	_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 1024, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20, CpusetCpus: "0-1",
		OomScoreAdj: 100, Unified: map[string]string{"pids.max": "64"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(ctx, id)
	hc := c.HostConfig
	if hc.CPUShares != 1024 || hc.CPUQuota != 50000 || hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.CpusetCpus != "0-1" || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("after update: %+v", hc.Resources)
	}
	// ContainerStatus reports them, as the kubelet's in-place resize reads them back.
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Status.GetResources().GetLinux(); r.GetCpuShares() != 1024 || r.GetCpuQuota() != 50000 || r.GetCpuPeriod() != 100000 ||
		r.GetMemoryLimitInBytes() != 256<<20 || r.GetMemorySwapLimitInBytes() != 256<<20 || r.GetCpusetCpus() != "0-1" {
		t.Errorf("ContainerStatus resources after update: %+v", r)
	}
	// An update without memory keeps the memory and swap limits.
	if _, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}); err != nil {
		t.Fatal(err)
	}
	if c, _ = fake.InspectContainer(ctx, id); c.HostConfig.Memory != 256<<20 || c.HostConfig.MemorySwap != 256<<20 || c.HostConfig.CPUShares != 512 {
		t.Errorf("after a CPU-only update: %+v", c.HostConfig.Resources)
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

// TestUpdateContainerMemoryCarriesSwap changes the memory limit of containers created with and
// without limits, as `crictl update --memory` (no swap) and the kubelet's resize (swap = memory,
// or memory.swap.max on cgroup v2) do. The fake refuses what Docker refuses: a memory limit
// above the stored MemorySwap without a MemorySwap in the same update, which is every memory
// limit on a container created without one (MemorySwap 0).
// UpdateContainerResources fails when Docker refuses the update, and the container keeps its
// resources.
func TestUpdateContainerResourcesFailsWhenDockerRefuses(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "resize", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	fake.InjectError("UpdateContainer", cerrdefs.ErrInvalidArgument.WithMessage("Memory limit should be smaller than already set memoryswap limit"))
	_, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}})
	if err == nil {
		t.Fatal("UpdateContainerResources succeeded although Docker refused the update")
	}
	if c, _ := fake.InspectContainer(ctx, id); c.HostConfig.Memory == 256<<20 {
		t.Errorf("the refused memory limit was applied")
	}
}

func TestUpdateContainerMemoryCarriesSwap(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name              string
		created           *runtimeapi.LinuxContainerResources
		update            *runtimeapi.LinuxContainerResources
		wantMem, wantSwap int64
	}{
		{"no limit, memory alone (crictl update --memory 128M)", nil,
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi}, 128 * mi, 128 * mi},
		{"no limit, the kubelet's resize without swap", nil,
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi}, 128 * mi, 128 * mi},
		{"no limit, cgroup v2 swap allowance", nil,
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: map[string]string{"memory.swap.max": "33554432"}}, 128 * mi, 160 * mi},
		{"no limit, unlimited swap", nil,
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, Unified: map[string]string{"memory.swap.max": "max"}}, 128 * mi, -1},
		{"no limit, memory from memory.max", nil,
			&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.max": "134217728"}}, 128 * mi, 128 * mi},
		{"no swap, raised above Docker's stored memory+swap",
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, MemorySwapLimitInBytes: 64 * mi},
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi}, 256 * mi, 256 * mi},
		{"no swap, lowered",
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 * mi, MemorySwapLimitInBytes: 256 * mi},
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi}, 64 * mi, 64 * mi},
		{"swap given at create, memory alone: no swap, as containerd",
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, MemorySwapLimitInBytes: 512 * mi},
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1024 * mi}, 1024 * mi, 1024 * mi},
		{"swap given in the update",
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, MemorySwapLimitInBytes: 64 * mi},
			&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 192 * mi}, 128 * mi, 192 * mi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := libdocker.NewFake()
			s := newTestService(t, fake, Options{})
			ctx := context.Background()
			podID, podCfg := runPod(t, s, "swap", "")
			cfg := containerConfig("c")
			cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: tc.created}
			resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: resp.ContainerId, Linux: tc.update}); err != nil {
				t.Fatalf("update: %v", err)
			}
			c, _ := fake.InspectContainer(ctx, resp.ContainerId)
			if c.HostConfig.Memory != tc.wantMem || c.HostConfig.MemorySwap != tc.wantSwap {
				t.Errorf("Memory %d MemorySwap %d, want %d and %d", c.HostConfig.Memory, c.HostConfig.MemorySwap, tc.wantMem, tc.wantSwap)
			}
		})
	}
}

// TestCreateContainerMemoryWithoutSwapHasNoSwap: a memory limit without a swap limit means no
// swap at create too (containerd's and upstream cri-dockerd's choice), not Docker's default of
// as much swap again as memory.
func TestCreateContainerMemoryWithoutSwapHasNoSwap(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "noswap", "")
	for name, tc := range map[string]struct {
		r                 *runtimeapi.LinuxContainerResources
		wantMem, wantSwap int64
	}{
		"memory only":   {&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}, 64 << 20, 64 << 20},
		"swap given":    {&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 96 << 20}, 64 << 20, 96 << 20},
		"no limit":      {&runtimeapi.LinuxContainerResources{CpuShares: 512}, 0, 0},
		"v2 swap limit": {&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, Unified: map[string]string{"memory.swap.max": "0"}}, 64 << 20, 64 << 20},
	} {
		cfg := containerConfig(strings.ReplaceAll(name, " ", "-"))
		cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: tc.r}
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, _ := fake.InspectContainer(ctx, resp.ContainerId)
		if c.HostConfig.Memory != tc.wantMem || c.HostConfig.MemorySwap != tc.wantSwap {
			t.Errorf("%s: Memory %d MemorySwap %d, want %d and %d", name, c.HostConfig.Memory, c.HostConfig.MemorySwap, tc.wantMem, tc.wantSwap)
		}
	}
}
