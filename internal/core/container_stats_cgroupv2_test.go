package core

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/stats/statstest"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// A container on a cgroup v2 node, end to end: Docker's stats as Docker makes them from the
// fixture's files, and what we read of the files ourselves, into CRI stats and metrics.
func TestStatsAndMetricsOnCgroupV2(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetDockerRootDir(t.TempDir())
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	sys, proc := statstest.Fixture(t, "cgroupv2")
	useStats(s, stats.Config{Host: stats.NewHost(sys, proc)})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "v2", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	for _, c := range []string{podID, id} {
		inspect, err := fake.InspectContainer(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		statstest.AsProcess(t, proc, inspect.State.Pid)
	}
	const machineMemory = 8 << 30
	if err := fake.SetStats(id, statstest.DockerStatsV2(t, filepath.Join(sys, statstest.FixtureV2Dir), machineMemory)); err != nil {
		t.Fatal(err)
	}
	// The sandbox on a CNI network: Docker reports no interfaces, /proc/PID/net/dev has them.
	if err := fake.SetStats(podID, container.StatsResponse{PidsStats: container.PidsStats{Current: 1}, MemoryStats: container.MemoryStats{Usage: 1 << 20, Stats: map[string]uint64{"inactive_file": 0}}}); err != nil {
		t.Fatal(err)
	}

	resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	const usage, inactiveFile = 58720256, 8388608
	m := st.Memory
	if m.GetUsageBytes().GetValue() != usage || m.GetWorkingSetBytes().GetValue() != usage-inactiveFile || m.GetRssBytes().GetValue() != 41943040 ||
		m.GetPageFaults().GetValue() != 23456 || m.GetMajorPageFaults().GetValue() != 12 || m.GetAvailableBytes().GetValue() != machineMemory-(usage-inactiveFile) {
		t.Errorf("memory %v: want usage memory.current, working set less inactive_file, rss anon, faults pgfault and pgmajfault", m)
	}
	if st.Cpu.GetUsageCoreNanoSeconds().GetValue() != 2500000*1000 {
		t.Errorf("cpu %v, want cpu.stat usage_usec in ns", st.Cpu)
	}
	if st.Swap.GetSwapUsageBytes() == nil || st.Swap.SwapUsageBytes.Value != 1048576 {
		t.Errorf("swap %v, want memory.swap.current (Docker reports none on v2)", st.Swap)
	}

	// PSI from the cgroup's pressure files, totals from microseconds to nanoseconds.
	if p := st.Cpu.GetPsi(); p.GetSome().GetTotal() != 123456000 || p.GetSome().GetAvg10() != 1.5 || p.GetFull().GetTotal() != 0 {
		t.Errorf("cpu psi %v, want cpu.pressure's", p)
	}
	if p := st.Memory.GetPsi(); p.GetSome().GetTotal() != 4567000 || p.GetFull().GetTotal() != 890000 || p.GetFull().GetAvg60() != 0.02 {
		t.Errorf("memory psi %v, want memory.pressure's", p)
	}
	if io := st.GetIo(); io.GetTimestamp() == 0 || io.GetPsi().GetSome().GetAvg10() != 3.25 || io.GetPsi().GetFull().GetTotal() != 555000000 {
		t.Errorf("io %v, want io.pressure's", io)
	}

	pod, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Stats.Linux
	if l.GetProcess().GetProcessCount().GetValue() != 5+1 {
		t.Errorf("pod processes %v, want pids.current plus the sandbox's", l.Process)
	}
	if n := l.GetNetwork().GetDefaultInterface(); n.GetName() != "eth0" || n.GetRxBytes().GetValue() != 12345 || n.GetTxErrors().GetValue() != 3 {
		t.Errorf("pod network %v, want eth0 of the sandbox's /proc/PID/net/dev", l.Network)
	}

	metrics, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil || len(metrics.PodMetrics) != 1 || len(metrics.PodMetrics[0].ContainerMetrics) != 1 {
		t.Fatalf("ListPodSandboxMetrics = %v, %v", metrics, err)
	}
	// The pod's network metrics come from the same /proc/PID/net/dev.
	rx := false
	for _, mt := range metrics.PodMetrics[0].Metrics {
		if mt.Name == "container_network_receive_bytes_total" && slices.Contains(mt.LabelValues, "eth0") {
			rx = mt.Value.GetValue() == 12345
		}
	}
	if !rx {
		t.Errorf("pod metrics %v, want eth0's 12345 received bytes of the sandbox's /proc/PID/net/dev", metrics.PodMetrics[0].Metrics)
	}
	got := map[string]uint64{}
	for _, mt := range metrics.PodMetrics[0].ContainerMetrics[0].Metrics {
		key := mt.Name
		if extra := mt.LabelValues[len(metricBaseLabels):]; len(extra) > 0 {
			key += "{" + strings.Join(extra, ",") + "}"
		}
		got[key] = mt.Value.GetValue()
	}
	for key, want := range map[string]uint64{
		// cpu.stat
		"container_cpu_usage_seconds_total{total}":  2,
		"container_cpu_user_seconds_total":          1,
		"container_cpu_system_seconds_total":        1,
		"container_cpu_cfs_periods_total":           40,
		"container_cpu_cfs_throttled_periods_total": 7,
		"container_cpu_cfs_throttled_seconds_total": 3,
		// memory.current, memory.stat, memory.events, memory.swap.current
		"container_memory_usage_bytes":                          usage,
		"container_memory_working_set_bytes":                    usage - inactiveFile,
		"container_memory_rss":                                  41943040,
		"container_memory_cache":                                12582912,
		"container_memory_mapped_file":                          4194304,
		"container_memory_swap":                                 1048576,
		"container_memory_failcnt":                              3, // memory.events oom, as Docker reports it
		"container_oom_events_total":                            2, // memory.events oom_kill
		"container_memory_kernel_usage":                         2211840,
		"container_memory_failures_total{pgfault,container}":    23456,
		"container_memory_failures_total{pgmajfault,hierarchy}": 12,
		// pids.current, pids.max "max" (no limit: 0, as cAdvisor says)
		"container_threads":     5,
		"container_threads_max": 0,
		// io.stat: bytes from Docker (lowercase ops), operations read here
		"container_blkio_device_usage_total{/dev/sda,8,0,Read}":  1048576,
		"container_blkio_device_usage_total{/dev/sda,8,0,Write}": 4194304,
		"container_blkio_device_usage_total{253:0,253,0,Read}":   2048,
		"container_fs_reads_bytes_total{/dev/sda}":               1048576,
		"container_fs_writes_bytes_total{/dev/sda}":              4194304,
		"container_fs_reads_total{/dev/sda}":                     64,
		"container_fs_writes_total{/dev/sda}":                    128,
		"container_fs_reads_total{253:0}":                        2,
		// cgroup.procs and /proc/PID/fd
		"container_processes":        2,
		"container_file_descriptors": 6,
		"container_sockets":          2,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", key, v, ok, want)
		}
	}
}
