package core

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

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

// A writable layer is measured again once its measure is fsEvery old: a layer that grew
// reports its new size.
func TestWritableLayerIsMeasuredAgainWhenOld(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetContainerdImageStore(true) // no upper directory: Docker's disk usage is the size
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	// Every call takes a new sample (maxAge 0) and measures again (fsEvery 0).
	s.stats.fsEvery, s.stats.maxAge = 0, 0
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "grow", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	for _, size := range []int64{4096, 8192} {
		if err := fake.SetContainerSize(id, size); err != nil {
			t.Fatal(err)
		}
		resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		if wl := resp.Stats.WritableLayer; wl == nil || wl.UsedBytes.GetValue() != uint64(size) {
			t.Errorf("writable layer %v, want %d bytes", wl, size)
		}
	}
}

// A container whose first stats call failed has no sample; the background refresh takes one.
func TestBackgroundRefreshSamplesAContainerWhoseFirstStatsFailed(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	s.stats.interval, s.stats.staleAfter, s.stats.keep = 20*time.Millisecond, time.Hour, time.Hour
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "retry", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	fake.InjectError("ContainerStats", errors.New("daemon busy"))
	if resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{}); err == nil && len(resp.Stats) != 0 {
		t.Fatalf("stats of a container whose stats call failed: %v", resp.Stats)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		s.stats.mu.Lock()
		defer s.stats.mu.Unlock()
		e := s.stats.entries[id]
		return e != nil && e.cur != nil
	}, "the background refresh took no sample")
}

// A background round refreshes a sample once it is half an interval old, so that an RPC
// between two ticks finds one that is not stale; a younger sample is left alone, and a
// container no RPC asked about within keep is forgotten.
func TestBackgroundRoundRefreshesSamplesHalfAnIntervalOld(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	c := s.stats
	podID, podCfg := runPod(t, s, "round", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	if _, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	e := c.entries[id]
	c.mu.Unlock()
	if e == nil || e.cur == nil {
		t.Fatal("ContainerStats left no sample")
	}
	sampledAt, wanted := e.cur.at, e.wanted
	round := func(now time.Time) (refreshed bool) {
		before := fake.Calls("ContainerStats")
		c.tick(now)
		c.mu.Lock()
		ch := e.inflight
		c.mu.Unlock()
		if ch != nil {
			<-ch
		}
		return fake.Calls("ContainerStats") > before
	}
	if round(sampledAt.Add(c.interval / 4)) {
		t.Error("a round refreshed a sample a quarter of an interval old")
	}
	if !round(sampledAt.Add(c.interval * 3 / 4)) {
		t.Error("a round left a sample three quarters of an interval old (the kubelet's next poll would find it stale or call Docker)")
	}
	c.tick(wanted.Add(c.keep + time.Second))
	c.mu.Lock()
	_, kept := c.entries[id]
	c.mu.Unlock()
	if kept {
		t.Error("a container no RPC asked about for longer than keep is still refreshed")
	}
}
