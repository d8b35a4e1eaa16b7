package core

import (
	"context"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// ContainerStats reports one container's CPU, memory, swap and writable layer from the stats
// cache (see internal/stats). A container that is not running has attributes only.
func (s *Service) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	list, err := s.listOurs(ctx, containerTypeContainer, id, nil)
	if err != nil {
		return nil, dockerError(err, "list container %q", id)
	}
	if len(list) != 1 {
		return nil, notFoundf("container %q not found", id)
	}
	c := list[0]
	if c.State != string(container.StateRunning) {
		return &runtimeapi.ContainerStatsResponse{Stats: &runtimeapi.ContainerStats{Attributes: containerAttributes(c)}}, nil
	}
	snaps := s.stats.Collect(ctx, []string{c.ID}, true)
	snap, ok := snaps[c.ID]
	if !ok {
		if err := s.stats.LastError(c.ID); err != nil {
			return nil, dockerError(err, "stats of container %q", id)
		}
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return nil, notFoundf("container %q not found", id)
	}
	return &runtimeapi.ContainerStatsResponse{Stats: s.containerStats(ctx, c, snap)}, nil
}

// ListContainerStats reports the running containers that match the filter, from one Docker
// list call and the stats cache.
func (s *Service) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	stats, err := s.listContainerStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: stats}, nil
}

func (s *Service) listContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	list, err := s.listCRIContainers(ctx, f.GetId(), f.GetPodSandboxId(), f.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	running := make([]listed, 0, len(list))
	ids := make([]string, 0, len(list))
	for _, c := range list {
		labels, _ := splitLabels(c.Labels)
		if c.State != string(container.StateRunning) || !matchesSelector(labels, f.GetLabelSelector()) {
			continue
		}
		running = append(running, c)
		ids = append(ids, c.ID)
	}
	snaps := s.stats.Collect(ctx, ids, true)
	out := make([]*runtimeapi.ContainerStats, 0, len(running))
	for _, c := range running {
		if snap, ok := snaps[c.ID]; ok {
			out = append(out, s.containerStats(ctx, c, snap))
		}
	}
	return out, nil
}

func containerAttributes(c listed) *runtimeapi.ContainerAttributes {
	labels, annotations := splitLabels(c.Labels)
	return &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.name.containerMetadata(), Labels: labels, Annotations: annotations}
}

// containerStats builds a container's CRI stats from its snapshot.
func (s *Service) containerStats(ctx context.Context, c listed, snap stats.Snapshot) *runtimeapi.ContainerStats {
	out := &runtimeapi.ContainerStats{Attributes: containerAttributes(c)}
	cur := snap.Cur
	if cur.Running {
		ts := cur.At.UnixNano()
		out.Cpu = &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cur.CPUTotal}}
		if rate, ok := snap.UsageNanoCores(); ok {
			out.Cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: rate}
		}
		out.Memory = &runtimeapi.MemoryUsage{
			Timestamp:       ts,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: cur.WorkingSet},
			UsageBytes:      &runtimeapi.UInt64Value{Value: cur.MemUsage},
			RssBytes:        &runtimeapi.UInt64Value{Value: cur.RSS},
			PageFaults:      &runtimeapi.UInt64Value{Value: cur.PageFaults},
			MajorPageFaults: &runtimeapi.UInt64Value{Value: cur.MajFaults},
		}
		if cur.MemLimit > cur.WorkingSet {
			out.Memory.AvailableBytes = &runtimeapi.UInt64Value{Value: cur.MemLimit - cur.WorkingSet}
		}
		if cur.HasSwap {
			out.Swap = &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: cur.Swap}}
		}
		if psi := cur.PSI; psi != nil {
			out.Cpu.Psi, out.Memory.Psi = criPSI(psi.CPU), criPSI(psi.Memory)
			if psi.IO != nil {
				out.Io = &runtimeapi.IoUsage{Timestamp: ts, Psi: criPSI(psi.IO)}
			}
		}
	}
	if fsu := snap.FS; fsu != nil {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: fsu.At.UnixNano(),
			FsId:      &runtimeapi.FilesystemIdentifier{Mountpoint: s.layersMountpoint(ctx)},
			UsedBytes: &runtimeapi.UInt64Value{Value: fsu.Bytes},
		}
		if fsu.HasInodes {
			out.WritableLayer.InodesUsed = &runtimeapi.UInt64Value{Value: fsu.Inodes}
		}
	}
	return out
}

// layersMountpoint names the filesystem of writable layers: Docker's root directory, or
// containerd's snapshotter root with the containerd image store (imagefs.go).
func (s *Service) layersMountpoint(ctx context.Context) string {
	return s.layers.root(ctx).mountpoint
}

// criPSI is a pressure file in the CRI's terms (totals in nanoseconds); nil for none.
func criPSI(p *stats.Pressure) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	line := func(l stats.PressureLine) *runtimeapi.PsiData {
		return &runtimeapi.PsiData{Total: l.TotalMicros * 1000, Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
	}
	return &runtimeapi.PsiStats{Some: line(p.Some), Full: line(p.Full)}
}
