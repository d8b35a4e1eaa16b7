package core

import (
	"context"
	"sort"
	"time"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// PodSandboxStats reports a ready pod: its containers' stats, their sums, and the network of
// the sandbox.
func (s *Service) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	id := req.GetPodSandboxId()
	if id == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	stats, err := s.listPodSandboxStats(ctx, id, nil, true)
	if err != nil {
		return nil, err
	}
	if len(stats) != 1 {
		return nil, notFoundf("pod sandbox %q not found or not ready", id)
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: stats[0]}, nil
}

// ListPodSandboxStats reports the ready pods that match the filter, from two Docker list calls
// (sandboxes, containers) and the stats cache.
func (s *Service) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	stats, err := s.listPodSandboxStats(ctx, req.GetFilter().GetId(), req.GetFilter().GetLabelSelector(), false)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: stats}, nil
}

func (s *Service) listPodSandboxStats(ctx context.Context, idPrefix string, selector map[string]string, exact bool) ([]*runtimeapi.PodSandboxStats, error) {
	sandboxes, err := s.listOurs(ctx, containerTypeSandbox, idPrefix, selector)
	if err != nil {
		return nil, dockerError(err, "list pod sandboxes")
	}
	if exact && len(sandboxes) > 1 {
		return nil, notFoundf("pod sandbox %q is ambiguous", idPrefix)
	}
	pods := map[string]listed{}
	var podIDs, ids []string
	for _, sb := range sandboxes {
		labels, _ := splitLabels(sb.Labels)
		if sb.State != string(container.StateRunning) || !matchesSelector(labels, selector) {
			continue
		}
		pods[sb.ID] = sb
		podIDs = append(podIDs, sb.ID)
		ids = append(ids, sb.ID)
	}
	if len(pods) == 0 {
		return nil, nil
	}
	onePod := ""
	if len(pods) == 1 {
		onePod = podIDs[0]
	}
	ctrs, err := s.listCRIContainers(ctx, "", onePod, nil)
	if err != nil {
		return nil, err
	}
	byPod := map[string][]listed{}
	for _, c := range ctrs {
		podID := c.Labels[sandboxIDLabel]
		if _, ok := pods[podID]; ok && c.State == string(container.StateRunning) {
			byPod[podID] = append(byPod[podID], c)
			ids = append(ids, c.ID)
		}
	}
	snaps := s.stats.Collect(ctx, ids, true)
	sort.Strings(podIDs)
	out := make([]*runtimeapi.PodSandboxStats, 0, len(pods))
	for _, podID := range podIDs {
		out = append(out, s.podStats(ctx, pods[podID], byPod[podID], snaps))
	}
	return out, nil
}

// podStats sums the pod's containers and its sandbox, and takes the network from the sandbox,
// whose namespace they share: from Docker, or from /proc for pods networked by CNI.
func (s *Service) podStats(ctx context.Context, sb listed, ctrs []listed, snaps map[string]stats.Snapshot) *runtimeapi.PodSandboxStats {
	labels, annotations := splitLabels(sb.Labels)
	out := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.ID, Metadata: sb.name.sandboxMetadata(), Labels: labels, Annotations: annotations},
		Linux:      &runtimeapi.LinuxPodSandboxStats{},
	}
	var (
		at                                    time.Time
		cpu, rate, ws, usage, rss, pf, mpf, n uint64
		rateKnown                             = true
		seen                                  bool
	)
	add := func(snap stats.Snapshot) {
		cur := snap.Cur
		if cur == nil || !cur.Running {
			return
		}
		seen = true
		if cur.At.After(at) {
			at = cur.At
		}
		cpu += cur.CPUTotal
		if r, ok := snap.UsageNanoCores(); ok {
			rate += r
		} else {
			rateKnown = false
		}
		ws, usage, rss, pf, mpf, n = ws+cur.WorkingSet, usage+cur.MemUsage, rss+cur.RSS, pf+cur.PageFaults, mpf+cur.MajFaults, n+cur.Pids
	}
	sandboxSnap, hasSandbox := snaps[sb.ID]
	if hasSandbox {
		add(sandboxSnap)
	}
	for _, c := range ctrs {
		if snap, ok := snaps[c.ID]; ok {
			add(snap)
			out.Linux.Containers = append(out.Linux.Containers, s.containerStats(ctx, c, snap))
		}
	}
	if !seen {
		return out
	}
	ts := at.UnixNano()
	out.Linux.Cpu = &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}}
	if rateKnown {
		out.Linux.Cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: rate}
	}
	out.Linux.Memory = &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws},
		UsageBytes:      &runtimeapi.UInt64Value{Value: usage},
		RssBytes:        &runtimeapi.UInt64Value{Value: rss},
		PageFaults:      &runtimeapi.UInt64Value{Value: pf},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: mpf},
	}
	out.Linux.Process = &runtimeapi.ProcessUsage{Timestamp: ts, ProcessCount: &runtimeapi.UInt64Value{Value: n}}
	if hasSandbox && sandboxSnap.Cur.Running {
		out.Linux.Network = podNetwork(s.stats.Host(), sandboxSnap, ts)
	}
	return out
}

// podNetwork reports the sandbox's interfaces, eth0 (or the first) as the default.
func podNetwork(host stats.Host, snap stats.Snapshot, ts int64) *runtimeapi.NetworkUsage {
	nets := snap.Cur.Networks
	if len(nets) == 0 && snap.Meta != nil && snap.Meta.Pid > 0 && !snap.Meta.HostNetwork {
		nets, _ = host.NetDev(snap.Meta.Pid)
	}
	if len(nets) == 0 {
		return nil
	}
	names := make([]string, 0, len(nets))
	for name := range nets {
		names = append(names, name)
	}
	sort.Strings(names)
	usage := &runtimeapi.NetworkUsage{Timestamp: ts}
	for _, name := range names {
		n := nets[name]
		iface := &runtimeapi.NetworkInterfaceUsage{
			Name:     name,
			RxBytes:  &runtimeapi.UInt64Value{Value: n.RxBytes},
			RxErrors: &runtimeapi.UInt64Value{Value: n.RxErrors},
			TxBytes:  &runtimeapi.UInt64Value{Value: n.TxBytes},
			TxErrors: &runtimeapi.UInt64Value{Value: n.TxErrors},
		}
		usage.Interfaces = append(usage.Interfaces, iface)
		if name == "eth0" || usage.DefaultInterface == nil {
			usage.DefaultInterface = iface
		}
	}
	return usage
}
