package core

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// The kubelet's CRI metrics (PodAndContainerStatsFromCRI): the cAdvisor metrics of each pod's
// containers, from the same stats cache as ContainerStats, plus what only the node can tell
// (open files and sockets of the container's processes, OOM kills, kernel memory), read from
// /proc and the container's cgroup. Metrics carry cAdvisor's labels id, name, image, container,
// pod and namespace (the kubelet passes them on as they are; "POD" is the sandbox's container),
// and some one more (interface, device, ...).
//
// Not reported: hugetlb, pressure (PSI), ulimits and memory reservation, which Docker's stats
// lack and the CRI validation suite lists as not yet implemented by runtimes.

var metricBaseLabels = []string{"id", "name", "image", "container", "pod", "namespace"}

type metricDesc struct {
	name   string
	help   string
	labels []string // after the base labels
	gauge  bool
}

var metricDescs = []metricDesc{
	{"container_blkio_device_usage_total", "Blkio device bytes usage", []string{"device", "major", "minor", "operation"}, false},
	{"container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", nil, false},
	{"container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", nil, false},
	{"container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", nil, false},
	{"container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", nil, false},
	{"container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", []string{"cpu"}, false},
	{"container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", nil, false},
	{"container_file_descriptors", "Number of open file descriptors for the container.", nil, true},
	{"container_fs_inodes_free", "Number of available Inodes", []string{"device"}, true},
	{"container_fs_inodes_total", "Number of Inodes", []string{"device"}, true},
	{"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", []string{"device"}, true},
	{"container_fs_reads_bytes_total", "Cumulative count of bytes read", []string{"device"}, false},
	{"container_fs_reads_total", "Cumulative count of reads completed", []string{"device"}, false},
	{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", []string{"device"}, true},
	{"container_fs_writes_bytes_total", "Cumulative count of bytes written", []string{"device"}, false},
	{"container_fs_writes_total", "Cumulative count of writes completed", []string{"device"}, false},
	{"container_last_seen", "Last time a container was seen by the exporter", nil, true},
	{"container_memory_cache", "Number of bytes of page cache memory.", nil, true},
	{"container_memory_failcnt", "Number of memory usage hits limits", nil, false},
	{"container_memory_failures_total", "Cumulative count of memory allocation failures.", []string{"failure_type", "scope"}, false},
	{"container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", nil, true},
	{"container_memory_mapped_file", "Size of memory mapped files in bytes.", nil, true},
	{"container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", nil, true},
	{"container_memory_rss", "Size of RSS in bytes.", nil, true},
	{"container_memory_swap", "Container swap usage in bytes.", nil, true},
	{"container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", nil, true},
	{"container_memory_working_set_bytes", "Current working set in bytes.", nil, true},
	{"container_network_receive_bytes_total", "Cumulative count of bytes received", []string{"interface"}, false},
	{"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", []string{"interface"}, false},
	{"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", []string{"interface"}, false},
	{"container_network_receive_packets_total", "Cumulative count of packets received", []string{"interface"}, false},
	{"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", []string{"interface"}, false},
	{"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", []string{"interface"}, false},
	{"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", []string{"interface"}, false},
	{"container_network_transmit_packets_total", "Cumulative count of packets transmitted", []string{"interface"}, false},
	{"container_oom_events_total", "Count of out of memory events observed for the container", nil, false},
	{"container_processes", "Number of processes running inside the container.", nil, true},
	{"container_sockets", "Number of open sockets for the container.", nil, true},
	{"container_spec_cpu_period", "CPU period of the container.", nil, true},
	{"container_spec_cpu_quota", "CPU quota of the container.", nil, true},
	{"container_spec_cpu_shares", "CPU share of the container.", nil, true},
	{"container_spec_memory_limit_bytes", "Memory limit for the container.", nil, true},
	{"container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", nil, true},
	{"container_start_time_seconds", "Start time of the container since unix epoch in seconds.", nil, true},
	{"container_threads", "Number of threads running inside the container", nil, true},
	{"container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", nil, true},
}

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics reports.
func (s *Service) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	out := make([]*runtimeapi.MetricDescriptor, 0, len(metricDescs))
	for _, d := range metricDescs {
		out = append(out, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: append(append([]string(nil), metricBaseLabels...), d.labels...)})
	}
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: out}, nil
}

// ListPodSandboxMetrics reports the metrics of every ready pod's running containers, and the
// pod's network.
func (s *Service) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	metrics, err := s.listPodSandboxMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: metrics}, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics, streamed.
func (s *Service) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	metrics, err := s.listPodSandboxMetrics(stream.Context())
	if err != nil {
		return err
	}
	return sendChunks(metrics, func(items []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: items})
	})
}

func (s *Service) listPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	sandboxes, err := s.listOurs(ctx, containerTypeSandbox, "", nil)
	if err != nil {
		return nil, dockerError(err, "list pod sandboxes")
	}
	ctrs, err := s.listOurs(ctx, containerTypeContainer, "", nil)
	if err != nil {
		return nil, dockerError(err, "list containers")
	}
	var ids []string
	ready := map[string]bool{}
	for _, sb := range sandboxes {
		if sb.State == string(container.StateRunning) {
			ready[sb.ID] = true
			ids = append(ids, sb.ID)
		}
	}
	byPod := map[string][]listed{}
	for _, c := range ctrs {
		if podID := c.Labels[sandboxIDLabel]; ready[podID] && c.State == string(container.StateRunning) {
			byPod[podID] = append(byPod[podID], c)
			ids = append(ids, c.ID)
		}
	}
	snaps := s.stats.Collect(ctx, ids, false)
	fs := s.filesystemOf(ctx)
	now := time.Now()
	var out []*runtimeapi.PodSandboxMetrics
	for _, sb := range sandboxes {
		if !ready[sb.ID] {
			continue
		}
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.ID}
		if snap, ok := snaps[sb.ID]; ok && snap.Cur.Running {
			nets := snap.Cur.Networks
			if len(nets) == 0 && snap.Meta != nil && snap.Meta.Pid > 0 && !snap.Meta.HostNetwork {
				nets, _ = s.stats.Host().NetDev(snap.Meta.Pid)
			}
			pm.Metrics = networkMetrics(metricLabels(sb.ID, snap.Meta, sb.name), nets, snap.Cur.At)
		}
		for _, c := range byPod[sb.ID] {
			snap, ok := snaps[c.ID]
			if !ok || !snap.Cur.Running || snap.Cur.Raw == nil {
				continue
			}
			pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{ContainerId: c.ID, Metrics: containerMetrics(metricLabels(c.ID, snap.Meta, c.name), snap, fs, s.stats.Host(), now)})
		}
		out = append(out, pm)
	}
	return out, nil
}

// metricLabels are the base label values of a container.
func metricLabels(id string, meta *stats.Meta, name parsedName) []string {
	dockerName, image := "", ""
	if meta != nil {
		dockerName, image = meta.Name, meta.Image
	}
	return []string{id, dockerName, image, name.container, name.pod, name.namespace}
}

// metricSet builds the metrics of one container, all with its base labels.
type metricSet struct {
	base []string
	ts   int64
	out  []*runtimeapi.Metric
}

func (m *metricSet) add(name string, gauge bool, value uint64, extra ...string) {
	typ := runtimeapi.MetricType_COUNTER
	if gauge {
		typ = runtimeapi.MetricType_GAUGE
	}
	m.out = append(m.out, &runtimeapi.Metric{
		Name: name, Timestamp: m.ts, MetricType: typ,
		LabelValues: append(append([]string(nil), m.base...), extra...),
		Value:       &runtimeapi.UInt64Value{Value: value},
	})
}

func networkMetrics(base []string, nets map[string]container.NetworkStats, at time.Time) []*runtimeapi.Metric {
	m := &metricSet{base: base, ts: at.UnixNano()}
	names := make([]string, 0, len(nets))
	for name := range nets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := nets[name]
		m.add("container_network_receive_bytes_total", false, n.RxBytes, name)
		m.add("container_network_receive_errors_total", false, n.RxErrors, name)
		m.add("container_network_receive_packets_dropped_total", false, n.RxDropped, name)
		m.add("container_network_receive_packets_total", false, n.RxPackets, name)
		m.add("container_network_transmit_bytes_total", false, n.TxBytes, name)
		m.add("container_network_transmit_errors_total", false, n.TxErrors, name)
		m.add("container_network_transmit_packets_dropped_total", false, n.TxDropped, name)
		m.add("container_network_transmit_packets_total", false, n.TxPackets, name)
	}
	return m.out
}

// nodeFS is the filesystem writable layers live on.
type nodeFS struct {
	device                    string
	inodesFree, inodes, bytes uint64
	ok                        bool
}

func (s *Service) filesystemOf(ctx context.Context) nodeFS {
	root := s.layersMountpoint(ctx)
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return nodeFS{device: root}
	}
	return nodeFS{device: root, inodesFree: st.Ffree, inodes: st.Files, bytes: st.Blocks * uint64(st.Bsize), ok: true}
}

// containerMetrics converts a container's snapshot, and what /proc and its cgroup say, into
// metrics. Seconds are whole seconds: CRI metric values are integers.
func containerMetrics(base []string, snap stats.Snapshot, fs nodeFS, host stats.Host, now time.Time) []*runtimeapi.Metric {
	cur, raw, meta := snap.Cur, snap.Cur.Raw, snap.Meta
	m := &metricSet{base: base, ts: cur.At.UnixNano()}
	sec := func(ns uint64) uint64 { return ns / uint64(time.Second) }
	cpu := raw.CPUStats
	m.add("container_cpu_usage_seconds_total", false, sec(cpu.CPUUsage.TotalUsage), "total")
	m.add("container_cpu_user_seconds_total", false, sec(cpu.CPUUsage.UsageInUsermode))
	m.add("container_cpu_system_seconds_total", false, sec(cpu.CPUUsage.UsageInKernelmode))
	m.add("container_cpu_cfs_periods_total", false, cpu.ThrottlingData.Periods)
	m.add("container_cpu_cfs_throttled_periods_total", false, cpu.ThrottlingData.ThrottledPeriods)
	m.add("container_cpu_cfs_throttled_seconds_total", false, sec(cpu.ThrottlingData.ThrottledTime))

	mem := raw.MemoryStats
	stat := func(v1, v2 string) uint64 {
		if v, ok := mem.Stats[v1]; ok {
			return v
		}
		return mem.Stats[v2]
	}
	m.add("container_memory_usage_bytes", true, cur.MemUsage)
	m.add("container_memory_working_set_bytes", true, cur.WorkingSet)
	m.add("container_memory_rss", true, cur.RSS)
	m.add("container_memory_cache", true, stat("total_cache", "file"))
	m.add("container_memory_mapped_file", true, stat("total_mapped_file", "file_mapped"))
	m.add("container_memory_swap", true, cur.Swap)
	m.add("container_memory_failcnt", false, mem.Failcnt)
	m.add("container_memory_max_usage_bytes", true, max(mem.MaxUsage, cur.MemUsage))
	for _, f := range []struct {
		kind      string
		container uint64
		hierarchy uint64
	}{
		{"pgfault", stat("pgfault", "pgfault"), stat("total_pgfault", "pgfault")},
		{"pgmajfault", stat("pgmajfault", "pgmajfault"), stat("total_pgmajfault", "pgmajfault")},
	} {
		m.add("container_memory_failures_total", false, f.container, f.kind, "container")
		m.add("container_memory_failures_total", false, f.hierarchy, f.kind, "hierarchy")
	}

	var reads, writes, readOps, writeOps = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	for _, e := range raw.BlkioStats.IoServiceBytesRecursive {
		dev := host.BlockDevice(e.Major, e.Minor)
		op := strings.ToLower(e.Op)
		if op == "" {
			continue
		}
		m.add("container_blkio_device_usage_total", false, e.Value, dev, strconv.FormatUint(e.Major, 10), strconv.FormatUint(e.Minor, 10), strings.ToUpper(op[:1])+op[1:])
		switch op {
		case "read":
			reads[dev] += e.Value
		case "write":
			writes[dev] += e.Value
		}
	}
	for _, e := range raw.BlkioStats.IoServicedRecursive {
		switch strings.ToLower(e.Op) {
		case "read":
			readOps[host.BlockDevice(e.Major, e.Minor)] += e.Value
		case "write":
			writeOps[host.BlockDevice(e.Major, e.Minor)] += e.Value
		}
	}
	if len(raw.BlkioStats.IoServicedRecursive) == 0 {
		// cgroup v2: Docker reports bytes only; the operations are io.stat's rios and wios.
		for _, e := range cur.IO {
			readOps[host.BlockDevice(e.Major, e.Minor)] += e.RIOs
			writeOps[host.BlockDevice(e.Major, e.Minor)] += e.WIOs
		}
	}
	for _, series := range []struct {
		name string
		v    map[string]uint64
	}{{"container_fs_reads_bytes_total", reads}, {"container_fs_writes_bytes_total", writes}, {"container_fs_reads_total", readOps}, {"container_fs_writes_total", writeOps}} {
		for dev, v := range series.v {
			m.add(series.name, false, v, dev)
		}
	}
	if fs.ok {
		m.add("container_fs_inodes_free", true, fs.inodesFree, fs.device)
		m.add("container_fs_inodes_total", true, fs.inodes, fs.device)
		m.add("container_fs_limit_bytes", true, fs.bytes, fs.device)
	}
	if snap.FS != nil {
		m.add("container_fs_usage_bytes", true, snap.FS.Bytes, fs.device)
	}

	m.add("container_threads", true, cur.Pids) // the pids cgroup counts tasks: threads
	// No limit is 0 here, as in cAdvisor; Docker says 0 on cgroup v1 and, from containerd's
	// cgroups library on v2, the largest uint64 for pids.max "max".
	threadsMax := raw.PidsStats.Limit
	if threadsMax == math.MaxUint64 {
		threadsMax = 0
	}
	m.add("container_threads_max", true, threadsMax)
	m.add("container_last_seen", true, uint64(now.Unix()))
	if meta != nil {
		r := meta.Resources
		m.add("container_spec_cpu_period", true, uint64(max(r.CPUPeriod, 0)))
		m.add("container_spec_cpu_quota", true, uint64(max(r.CPUQuota, 0)))
		m.add("container_spec_cpu_shares", true, uint64(max(r.CPUShares, 0)))
		m.add("container_spec_memory_limit_bytes", true, uint64(max(r.Memory, 0)))
		m.add("container_spec_memory_swap_limit_bytes", true, uint64(max(r.MemorySwap, 0)))
		if !meta.StartedAt.IsZero() {
			m.add("container_start_time_seconds", true, uint64(meta.StartedAt.Unix()))
		}
		if meta.Pid > 0 {
			if p, ok := host.Processes(meta.Pid); ok {
				m.add("container_processes", true, p.Processes)
				m.add("container_file_descriptors", true, p.FDs)
				m.add("container_sockets", true, p.Sockets)
			}
			if cg, ok := host.CgroupMemory(meta.Pid); ok {
				m.add("container_oom_events_total", false, cg.OOMKills)
				m.add("container_memory_kernel_usage", true, cg.Kernel)
			}
		}
	}
	return m.out
}
