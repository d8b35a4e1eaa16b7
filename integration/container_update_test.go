//go:build integration

package integration

import (
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUpdateMemoryOfAContainerWithoutLimit is `crictl update --memory 128M` on a container
// created without a memory limit, then lower and higher limits: each update says nothing about
// swap. Docker refuses a memory limit above the container's stored memory+swap limit (0 here)
// unless the update sets one too; cri-dockerd must carry it (no swap, as containerd gives).
func TestUpdateMemoryOfAContainerWithoutLimit(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "memupdate")
	sandboxID := runPod(t, d, podCfg, "")
	id := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	startContainer(t, d, id)
	if c, err := suite.docker.ContainerInspect(t.Context(), id); err != nil {
		t.Fatal(err)
	} else if c.HostConfig.Memory != 0 || c.HostConfig.MemorySwap != 0 {
		t.Fatalf("created with Memory %d MemorySwap %d, want no limits", c.HostConfig.Memory, c.HostConfig.MemorySwap)
	}

	// Each step is checked on its own: without the swap carried along, every one fails.
	for _, mib := range []int64{128, 64, 256} {
		want := mib << 20
		_, err := d.Runtime.UpdateContainerResources(t.Context(), &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: want},
		})
		if err != nil {
			t.Errorf("update to %d MiB: %v", mib, err)
			continue
		}
		c, err := suite.docker.ContainerInspect(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if c.HostConfig.Memory != want || c.HostConfig.MemorySwap != want {
			t.Errorf("update to %d MiB: docker inspect says Memory %d MemorySwap %d, want both %d (no swap)", mib, c.HostConfig.Memory, c.HostConfig.MemorySwap, want)
		}
		// What the kernel enforces: cgroup v1's memory and memory+swap limits, or v2's memory
		// and swap limits.
		files := map[string]string{
			"/sys/fs/cgroup/memory/memory.limit_in_bytes":       strconv.FormatInt(want, 10),
			"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": strconv.FormatInt(want, 10),
		}
		if _, _, code := execIn(t, d, id, "test", "-e", "/sys/fs/cgroup/memory.max"); code == 0 {
			files = map[string]string{"/sys/fs/cgroup/memory.max": strconv.FormatInt(want, 10), "/sys/fs/cgroup/memory.swap.max": "0"}
		}
		for file, value := range files {
			out, stderr, code := execIn(t, d, id, "cat", file)
			if code != 0 && strings.Contains(file, "memsw") {
				continue // swap accounting off (swapaccount=0): Docker limits memory only
			}
			if strings.TrimSpace(out) != value {
				t.Errorf("update to %d MiB: %s = %q (%s), want %s", mib, file, strings.TrimSpace(out), stderr, value)
			}
		}
	}
}
