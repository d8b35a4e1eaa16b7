//go:build integration

package integration

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestStatsOfARealContainer checks container and pod stats against what the container does: it
// burns some CPU, holds memory, writes 5 MiB into its writable layer and runs two processes.
func TestStatsOfARealContainer(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=") // Docker's bridge: these tests are not about networking
	podCfg := newPodConfig(t, "stats")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("worker", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; dd if=/dev/zero of=/big bs=1M count=5 2>/dev/null; touch /ready; `+sleeper)
	cfg.Labels = map[string]string{"stats": "yes"}
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)
	waitFor(t, "the worker to be ready", func() bool {
		_, _, code := execIn(t, d, ctrID, "test", "-f", "/ready")
		return code == 0
	})

	resp, err := d.Runtime.ContainerStats(t.Context(), &runtimeapi.ContainerStatsRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	if st.Attributes.GetId() != ctrID || st.Attributes.GetMetadata().GetName() != "worker" || st.Attributes.Labels["stats"] != "yes" {
		t.Errorf("attributes %v", st.Attributes)
	}
	if st.Cpu.GetTimestamp() == 0 || st.Cpu.GetUsageCoreNanoSeconds().GetValue() < 1e6 {
		t.Errorf("cpu %v: the worker has used CPU", st.Cpu)
	}
	if m := st.Memory; m.GetTimestamp() == 0 || m.GetWorkingSetBytes().GetValue() == 0 || m.GetUsageBytes().GetValue() < m.GetWorkingSetBytes().GetValue() {
		t.Errorf("memory %v", m)
	}
	// The writable layer is the container's overlay2 upper directory, measured like du.
	if wl := st.WritableLayer; wl.GetUsedBytes().GetValue() < 5<<20 || wl.GetInodesUsed().GetValue() < 2 || wl.GetFsId().GetMountpoint() == "" {
		t.Errorf("writable layer %v, want at least 5 MiB and the inodes of /big and /ready", wl)
	}

	list, err := d.Runtime.ListContainerStats(t.Context(), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"stats": "yes"}}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != ctrID {
		t.Errorf("ListContainerStats by label = %v, %v", list, err)
	}

	pod, err := d.Runtime.PodSandboxStats(t.Context(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Stats.GetLinux()
	if pod.Stats.Attributes.GetId() != sandboxID || len(l.GetContainers()) != 1 || l.Containers[0].Attributes.Id != ctrID {
		t.Errorf("pod attributes %v containers %v", pod.Stats.Attributes, l.GetContainers())
	}
	// pause, the worker's shell and its sleep.
	if l.GetProcess().GetProcessCount().GetValue() < 3 || l.GetCpu().GetUsageCoreNanoSeconds().GetValue() < st.Cpu.UsageCoreNanoSeconds.Value {
		t.Errorf("pod process %v cpu %v", l.GetProcess(), l.GetCpu())
	}
	if n := l.GetNetwork().GetDefaultInterface(); n.GetName() != "eth0" || n.GetRxBytes() == nil {
		t.Errorf("pod network %v, want eth0 of Docker's bridge", l.GetNetwork())
	}
	pods, err := d.Runtime.ListPodSandboxStats(t.Context(), &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: sandboxID}})
	if err != nil || len(pods.Stats) != 1 {
		t.Errorf("ListPodSandboxStats by id = %v, %v", pods, err)
	}
}

// dockerdCPU is the CPU time dockerd has used so far (utime + stime from /proc/PID/stat).
func dockerdCPU(tb testing.TB) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		tb.Fatalf("dockerd pid: %v", err)
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(raw)) + "/stat")
	if err != nil {
		tb.Fatalf("dockerd stat: %v", err)
	}
	// Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// BenchmarkListContainerStats compares, with 10 and 50 running containers, ListContainerStats
// through cri-dockerd (warm: answered from the stats cache; cold: the first call) with the
// Docker calls upstream makes for it: one GET /containers/{id}/stats?stream=false per container
// (made concurrently here, which is faster than upstream's loop, for the same dockerd CPU).
// dockerd's CPU time is read from /proc. The cache's own cost is the background refresh: its
// dockerd CPU per 10 s refresh period is reported as cri-bg-dockerd-cpu-ms/10s, to set against
// the raw calls a kubelet polling every 10 s would cause (raw-dockerd-cpu-ms/op).
//
//	go test -tags integration -run XXX -bench ListContainerStats -benchtime 5x ./integration/
func BenchmarkListContainerStats(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) { benchStats(b, n) })
	}
}

func benchStats(b *testing.B, n int) {
	d := StartDaemon(b, "--network-plugin=")
	ctx := b.Context()
	var ids []string
	for len(ids) < n {
		podCfg := newPodConfig(b, "bench-stats")
		sandboxID := runPod(b, d, podCfg, "")
		for i := 0; i < 10 && len(ids) < n; i++ {
			id := createContainer(b, d, sandboxID, podCfg, containerConfig(fmt.Sprintf("c%d", i), sleeper))
			startContainer(b, d, id)
			ids = append(ids, id)
		}
	}
	filter := &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{}}
	listCRI := func() {
		resp, err := d.Runtime.ListContainerStats(ctx, filter)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Stats) < n {
			b.Fatalf("%d stats, want at least %d", len(resp.Stats), n)
		}
	}
	rawAll := func() {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := suite.docker.ContainerStats(ctx, id, false)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}()
		}
		wg.Wait()
	}

	start, cpu0 := time.Now(), dockerdCPU(b)
	listCRI()
	coldWall, coldCPU := time.Since(start), dockerdCPU(b)-cpu0
	// The pods' sandboxes are sampled on the first pod stats call: not part of the steady state.
	if _, err := d.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{}); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	var criWall, rawWall, criCPU, rawCPU, podWall time.Duration
	for i := 0; i < b.N; i++ {
		start, cpu0 = time.Now(), dockerdCPU(b)
		listCRI()
		criWall += time.Since(start)
		criCPU += dockerdCPU(b) - cpu0

		start = time.Now()
		if _, err := d.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{}); err != nil {
			b.Fatal(err)
		}
		podWall += time.Since(start)

		start, cpu0 = time.Now(), dockerdCPU(b)
		rawAll()
		rawWall += time.Since(start)
		rawCPU += dockerdCPU(b) - cpu0
	}
	b.StopTimer()

	// The background refresh over one period, with the containers wanted.
	listCRI()
	time.Sleep(time.Second)
	cpu0 = dockerdCPU(b)
	time.Sleep(20 * time.Second)
	bgCPU := (dockerdCPU(b) - cpu0) / 2

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	per := func(d time.Duration) float64 { return ms(d) / float64(b.N) }
	b.ReportMetric(per(criWall), "cri-ms/op")
	b.ReportMetric(per(criCPU), "cri-dockerd-cpu-ms/op")
	b.ReportMetric(per(podWall), "cri-pod-stats-ms/op")
	b.ReportMetric(ms(coldWall), "cri-cold-ms")
	b.ReportMetric(ms(coldCPU), "cri-cold-dockerd-cpu-ms")
	b.ReportMetric(ms(bgCPU), "cri-bg-dockerd-cpu-ms/10s")
	b.ReportMetric(per(rawWall), "raw-ms/op")
	b.ReportMetric(per(rawCPU), "raw-dockerd-cpu-ms/op")
}

// TestPodSandboxMetricsOfARealPod checks the CRI metrics that only the node can give (processes,
// open files and sockets, OOM kills, kernel memory) besides Docker's, and that each metric has
// the labels its descriptor announces.
func TestPodSandboxMetricsOfARealPod(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "metrics")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("app", `nc -l -p 8080 & `+sleeper)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 1024, MemoryLimitInBytes: 64 << 20}
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)

	descs, err := d.Runtime.ListMetricDescriptors(t.Context(), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]int{}
	for _, desc := range descs.Descriptors {
		labels[desc.Name] = len(desc.LabelKeys)
	}
	var values map[string]uint64
	waitFor(t, "the listener to open its socket", func() bool {
		resp, err := d.Runtime.ListPodSandboxMetrics(t.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		values = map[string]uint64{}
		for _, pm := range resp.PodMetrics {
			if pm.PodSandboxId != sandboxID {
				continue
			}
			all := pm.Metrics
			for _, cm := range pm.ContainerMetrics {
				if cm.ContainerId == ctrID {
					all = append(all, cm.Metrics...)
				}
			}
			for _, m := range all {
				if n, ok := labels[m.Name]; !ok || n != len(m.LabelValues) {
					t.Fatalf("metric %s has %d labels, its descriptor %d", m.Name, len(m.LabelValues), n)
				}
				if _, seen := values[m.Name]; !seen {
					values[m.Name] = m.Value.GetValue()
				}
			}
		}
		return values["container_sockets"] > 0
	})
	for name, min := range map[string]uint64{
		"container_processes": 3, "container_file_descriptors": 3, "container_threads": 3,
		"container_spec_cpu_shares": 1024, "container_spec_cpu_period": 100000, "container_spec_memory_limit_bytes": 64 << 20,
		"container_memory_working_set_bytes": 1, "container_network_receive_packets_total": 0, "container_oom_events_total": 0,
		"container_memory_kernel_usage": 0, "container_start_time_seconds": 1, "container_fs_usage_bytes": 0, "container_fs_inodes_total": 1,
	} {
		if got, ok := values[name]; !ok || got < min {
			t.Errorf("%s = %d (reported: %v), want at least %d", name, got, ok, min)
		}
	}
}
