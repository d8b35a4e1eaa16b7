package core

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestPodSandboxMetricsMatchTheirDescriptors(t *testing.T) {
	fake := libdocker.NewFake()
	// The fs metrics statfs Docker's data root: one of the test's own, not the host's /var/lib/docker.
	fake.SetDockerRootDir(t.TempDir())
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	descs, err := s.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	labelKeys := map[string]int{}
	for _, d := range descs.Descriptors {
		if d.Help == "" || len(d.LabelKeys) < 3 {
			t.Errorf("descriptor %v", d)
		}
		labelKeys[d.Name] = len(d.LabelKeys)
	}

	podID, podCfg := runPod(t, s, "metrics", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	if err := fake.SetStats(id, container.StatsResponse{
		CPUStats: container.CPUStats{
			CPUUsage:       container.CPUUsage{TotalUsage: 3e9, UsageInUsermode: 2e9, UsageInKernelmode: 1e9},
			ThrottlingData: container.ThrottlingData{Periods: 10, ThrottledPeriods: 4, ThrottledTime: 5e9},
		},
		MemoryStats: container.MemoryStats{Usage: 50 << 20, MaxUsage: 60 << 20, Failcnt: 1, Stats: map[string]uint64{"total_cache": 5 << 20, "total_rss": 40 << 20, "total_mapped_file": 1 << 20, "total_swap": 0, "total_inactive_file": 4 << 20}},
		PidsStats:   container.PidsStats{Current: 4, Limit: 100},
		BlkioStats:  container.BlkioStats{IoServiceBytesRecursive: []container.BlkioStatEntry{{Major: 7, Minor: 0, Op: "Read", Value: 4096}, {Major: 7, Minor: 0, Op: "Write", Value: 8192}}},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil || len(resp.PodMetrics) != 1 {
		t.Fatalf("ListPodSandboxMetrics = %v, %v", resp, err)
	}
	pm := resp.PodMetrics[0]
	if pm.PodSandboxId != podID || len(pm.ContainerMetrics) != 1 || pm.ContainerMetrics[0].ContainerId != id {
		t.Fatalf("pod metrics of %q, containers %v", pm.PodSandboxId, pm.ContainerMetrics)
	}
	// Every metric is labelled as cAdvisor labels it: the container's id, Docker name and image,
	// and its CRI container, pod and namespace names (the sandbox's container is "POD").
	c, _ := fake.InspectContainer(ctx, id)
	for _, m := range pm.ContainerMetrics[0].Metrics {
		want := []string{id, strings.TrimPrefix(c.Name, "/"), c.Config.Image, "c", podCfg.Metadata.Name, podCfg.Metadata.Namespace}
		if len(m.LabelValues) < 6 || !slices.Equal(m.LabelValues[:6], want) {
			t.Errorf("metric %s labelled %q, want %q first", m.Name, m.LabelValues, want)
			break
		}
	}
	for _, m := range pm.Metrics {
		if len(m.LabelValues) < 6 || m.LabelValues[0] != podID || m.LabelValues[3] != "POD" || m.LabelValues[4] != podCfg.Metadata.Name {
			t.Errorf("pod metric %s labelled %q, want the sandbox's id, POD and the pod's name", m.Name, m.LabelValues)
			break
		}
	}
	values := map[string]uint64{}
	for _, m := range append(pm.Metrics, pm.ContainerMetrics[0].Metrics...) {
		n, ok := labelKeys[m.Name]
		if !ok || len(m.LabelValues) != n || m.Timestamp == 0 || m.Value == nil {
			t.Errorf("metric %v does not match its descriptor (%d labels)", m, n)
		}
		if _, seen := values[m.Name]; !seen {
			values[m.Name] = m.Value.GetValue()
		}
	}
	for name, want := range map[string]uint64{
		"container_cpu_usage_seconds_total": 3, "container_cpu_user_seconds_total": 2, "container_cpu_cfs_throttled_periods_total": 4,
		"container_cpu_cfs_throttled_seconds_total": 5, "container_memory_usage_bytes": 50 << 20, "container_memory_working_set_bytes": 46 << 20,
		"container_memory_cache": 5 << 20, "container_memory_max_usage_bytes": 60 << 20, "container_memory_failcnt": 1, "container_threads": 4,
		"container_threads_max": 100, "container_fs_reads_bytes_total": 4096, "container_fs_writes_bytes_total": 8192,
		"container_network_receive_bytes_total": 1000, "container_spec_cpu_shares": 0,
	} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", name, got, ok, want)
		}
	}
	// The filesystem's size is that of Docker's root directory's filesystem.
	info, _ := fake.Info(ctx)
	var st syscall.Statfs_t
	if err := syscall.Statfs(info.DockerRootDir, &st); err != nil {
		t.Fatal(err)
	}
	if got, want := values["container_fs_limit_bytes"], st.Blocks*uint64(st.Bsize); got != want {
		t.Errorf("container_fs_limit_bytes = %d, want %d of %s", got, want, info.DockerRootDir)
	}
	for _, name := range []string{"container_fs_usage_bytes", "container_fs_inodes_total", "container_last_seen", "container_start_time_seconds", "container_memory_failures_total", "container_blkio_device_usage_total"} {
		if _, ok := values[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
}

// The container_spec_* metrics are the limits Docker has in the container's HostConfig.
func TestContainerSpecMetricsAreTheContainersLimits(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetDockerRootDir(t.TempDir())
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "spec", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 512}}
	created, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ContainerId
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil || len(resp.PodMetrics) != 1 || len(resp.PodMetrics[0].ContainerMetrics) != 1 {
		t.Fatalf("ListPodSandboxMetrics = %v, %v", resp, err)
	}
	values := map[string]uint64{}
	for _, m := range resp.PodMetrics[0].ContainerMetrics[0].Metrics {
		values[m.Name] = m.Value.GetValue()
	}
	for name, want := range map[string]uint64{"container_spec_memory_limit_bytes": 64 << 20, "container_spec_cpu_shares": 512} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", name, got, ok, want)
		}
	}
}
