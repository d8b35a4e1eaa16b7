package libdocker

import (
	"context"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// fakeStats is what a container's stats report beyond Docker's defaults.
type fakeStats struct {
	set      bool
	response container.StatsResponse
}

// SetStats makes ContainerStats report st (ID, Name and Read filled in) for a running container.
// Without it a running container reports a tenth of a core since its start, 10 MiB of memory
// of which 2 MiB inactive file cache, one process, and traffic on eth0 where it has its own
// network.
func (f *Fake) SetStats(idOrName string, st container.StatsResponse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return err
	}
	if f.stats == nil {
		f.stats = map[string]*fakeStats{}
	}
	f.stats[c.resp.ID] = &fakeStats{set: true, response: clone(st)}
	return nil
}

// SetStatsDelay makes each ContainerStats call take d, to observe concurrency.
func (f *Fake) SetStatsDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsDelay = d
}

// MaxConcurrentStats is the most ContainerStats calls that were in flight at once.
func (f *Fake) MaxConcurrentStats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statsMaxInFlight
}

// ContainerStats implements Client with one-shot semantics: one sample, no PreCPUStats.
func (f *Fake) ContainerStats(ctx context.Context, id string) (container.StatsResponse, error) {
	f.mu.Lock()
	if err := f.enter(ctx, "ContainerStats"); err != nil {
		f.mu.Unlock()
		return container.StatsResponse{}, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		f.mu.Unlock()
		return container.StatsResponse{}, err
	}
	f.statsInFlight++
	f.statsMaxInFlight = max(f.statsMaxInFlight, f.statsInFlight)
	delay := f.statsDelay
	f.mu.Unlock()
	if delay > 0 {
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsInFlight--
	if err := ctx.Err(); err != nil {
		return container.StatsResponse{}, err
	}
	if c.removed {
		return container.StatsResponse{}, notFound("container", id)
	}
	st := container.StatsResponse{ID: c.resp.ID, Name: c.resp.Name}
	if !c.resp.State.Running {
		return st, nil
	}
	now := time.Now().UTC()
	if s := f.stats[c.resp.ID]; s != nil && s.set {
		st = clone(s.response)
		st.ID, st.Name = c.resp.ID, c.resp.Name
	} else {
		cpu := uint64(now.Sub(c.started).Nanoseconds() / 10)
		st.CPUStats = container.CPUStats{
			CPUUsage:    container.CPUUsage{TotalUsage: cpu, UsageInUsermode: cpu / 2, UsageInKernelmode: cpu / 2},
			SystemUsage: uint64(now.UnixNano()) * 2, OnlineCPUs: 2,
		}
		st.MemoryStats = container.MemoryStats{
			Usage: 10 << 20, Limit: 8 << 30,
			Stats: map[string]uint64{"total_inactive_file": 2 << 20, "total_rss": 6 << 20, "total_pgfault": 100, "total_pgmajfault": 1},
		}
		st.PidsStats = container.PidsStats{Current: 1}
		if mode := c.resp.HostConfig.NetworkMode; !strings.HasPrefix(string(mode), "container:") && mode != "host" && mode != "none" {
			st.Networks = map[string]container.NetworkStats{"eth0": {RxBytes: 1000, RxPackets: 10, TxBytes: 500, TxPackets: 5}}
		}
	}
	st.Read = now
	return st, nil
}

// UpdateContainer implements Client as Docker's update does: zero fields keep their value, and
// a memory limit above the container's memory+swap limit needs the latter in the same update.
// That includes a container without a memory limit, whose MemorySwap is 0 (none) or -1: Docker
// compares the new limit with that number (container.UpdateContainer, Docker 20.10 to 29).
func (f *Fake) UpdateContainer(ctx context.Context, id string, update container.UpdateConfig) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "UpdateContainer"); err != nil {
		return nil, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return nil, err
	}
	hc, u := c.resp.HostConfig, update.Resources
	if err := verifyMemory(u, true); err != nil {
		return nil, err
	}
	if u.Memory != 0 && u.Memory > hc.MemorySwap && u.MemorySwap == 0 {
		return nil, dErr(cerrdefs.ErrConflict, "Cannot update container %s: Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time", c.resp.ID)
	}
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set(&hc.CPUPeriod, u.CPUPeriod)
	set(&hc.CPUQuota, u.CPUQuota)
	set(&hc.CPUShares, u.CPUShares)
	set(&hc.Memory, u.Memory)
	set(&hc.MemorySwap, u.MemorySwap)
	set(&hc.MemoryReservation, u.MemoryReservation)
	if u.CpusetCpus != "" {
		hc.CpusetCpus = u.CpusetCpus
	}
	if u.CpusetMems != "" {
		hc.CpusetMems = u.CpusetMems
	}
	if u.PidsLimit != nil {
		v := *u.PidsLimit
		hc.PidsLimit = &v
	}
	f.emit(c, "update", nil)
	return nil, nil
}

// verifyMemory checks memory settings as the daemon's verifyPlatformContainerResources does
// before a create or an update (errors are "invalid parameter", HTTP 400).
func verifyMemory(r container.Resources, update bool) error {
	const minMemory = 6 << 20 // linuxMinMemory
	switch {
	case r.Memory != 0 && r.Memory < minMemory:
		return dErr(cerrdefs.ErrInvalidArgument, "Minimum memory limit allowed is 6MB")
	case r.Memory > 0 && r.MemorySwap > 0 && r.MemorySwap < r.Memory:
		return dErr(cerrdefs.ErrInvalidArgument, "Minimum memoryswap limit should be larger than memory limit, see usage")
	case r.Memory == 0 && r.MemorySwap > 0 && !update:
		return dErr(cerrdefs.ErrInvalidArgument, "You should always set the Memory limit when using Memoryswap limit, see usage")
	}
	return nil
}
