package stats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// newFake is a fake Docker with an image to run containers of.
func newFake() *libdocker.Fake {
	fake := libdocker.NewFake()
	fake.AddImage(libdocker.FakeImage("", "", "busybox"))
	return fake
}

// testCollector is a Collector on docker whose host is empty directories: the fake's containers
// have pids of the host's processes, whose /proc and cgroups are never read (a test that needs
// those gives fixtures).
func testCollector(t *testing.T, docker libdocker.Client, cfg Config) *Collector {
	t.Helper()
	cfg.Docker, cfg.Log = docker, logrus.NewEntry(logrus.New())
	if cfg.Host == (Host{}) {
		cfg.Host = NewHost(t.TempDir(), t.TempDir())
	}
	c := New(cfg)
	t.Cleanup(c.Close)
	return c
}

// startedContainer creates and starts a container in fake.
func startedContainer(t *testing.T, fake *libdocker.Fake, name string) string {
	t.Helper()
	ctx := context.Background()
	id, err := fake.CreateContainer(ctx, "k8s_"+name, &container.Config{Image: "busybox"}, &container.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// crictl samples twice a second apart: a sample an RPC got is refreshed for an RPC a second
// later.
func TestMaxAgeIsWithinCrictlsSecond(t *testing.T) {
	if c := New(Config{}); c.maxAge != statsMaxAge || statsMaxAge > time.Second {
		t.Fatalf("samples are refreshed after %v (statsMaxAge %v): crictl's second apart would get the same sample", c.maxAge, statsMaxAge)
	}
}

// A writable layer is measured again once its measure is fsEvery old: a layer that grew
// reports its new size.
func TestWritableLayerIsMeasuredAgainWhenOld(t *testing.T) {
	fake := newFake()
	fake.SetContainerdImageStore(true) // no upper directory: Docker's disk usage is the size
	c := testCollector(t, fake, Config{})
	// Every call takes a new sample (maxAge 0) and measures again (fsEvery 0).
	c.fsEvery, c.maxAge = 0, 0
	ctx := context.Background()
	id := startedContainer(t, fake, "grow")
	for _, size := range []int64{4096, 8192} {
		if err := fake.SetContainerSize(id, size); err != nil {
			t.Fatal(err)
		}
		snap, ok := c.Collect(ctx, []string{id}, true)[id]
		if !ok {
			t.Fatal("no sample")
		}
		if snap.FS == nil || snap.FS.Bytes != uint64(size) {
			t.Errorf("writable layer %+v, want %d bytes", snap.FS, size)
		}
	}
}

// A container whose first stats call failed has no sample; the background refresh takes one.
func TestBackgroundRefreshSamplesAContainerWhoseFirstStatsFailed(t *testing.T) {
	fake := newFake()
	c := testCollector(t, fake, Config{Interval: 20 * time.Millisecond, StaleAfter: time.Hour, Keep: time.Hour})
	ctx := context.Background()
	id := startedContainer(t, fake, "retry")
	fake.InjectError("ContainerStats", errors.New("daemon busy"))
	if snaps := c.Collect(ctx, []string{id}, true); len(snaps) != 0 {
		t.Fatalf("stats of a container whose stats call failed: %v", snaps)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		e := c.entries[id]
		return e != nil && e.cur != nil
	}, "the background refresh took no sample")
}

// A background round refreshes a sample once it is half an interval old, so that an RPC
// between two ticks finds one that is not stale; a younger sample is left alone, and a
// container no RPC asked about within keep is forgotten.
func TestBackgroundRoundRefreshesSamplesHalfAnIntervalOld(t *testing.T) {
	fake := newFake()
	c := testCollector(t, fake, Config{})
	id := startedContainer(t, fake, "round")
	if _, ok := c.Collect(context.Background(), []string{id}, true)[id]; !ok {
		t.Fatal("no sample")
	}
	c.mu.Lock()
	e := c.entries[id]
	c.mu.Unlock()
	if e == nil || e.cur == nil {
		t.Fatal("Collect left no sample")
	}
	sampledAt, wanted := e.cur.At, e.wanted
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

func TestStatsAreRefreshedInTheBackgroundAndGiveACPURate(t *testing.T) {
	fake := newFake()
	c := testCollector(t, fake, Config{Interval: 50 * time.Millisecond, StaleAfter: time.Hour, Keep: time.Hour})
	ctx := context.Background()
	id := startedContainer(t, fake, "bg")
	first, ok := c.Collect(ctx, []string{id}, true)[id]
	if !ok {
		t.Fatal("no sample")
	}
	if _, ok := first.UsageNanoCores(); ok {
		t.Errorf("a CPU rate from a single sample: %+v", first.Cur)
	}
	if !testutil.PollUntil(5*time.Second, 10*time.Millisecond, func() bool { return fake.Calls("ContainerStats") >= 3 }) {
		t.Fatalf("no background refresh: %d stats calls", fake.Calls("ContainerStats"))
	}
	next, ok := c.Collect(ctx, []string{id}, true)[id]
	if !ok {
		t.Fatal("no sample")
	}
	// The fake's container uses a tenth of a core.
	rate, _ := next.UsageNanoCores()
	if rate < 5e7 || rate > 2e8 || !next.Cur.At.After(first.Cur.At) {
		t.Errorf("cpu after refresh %d at %v (first at %v), want about 1e8 nano cores", rate, next.Cur.At, first.Cur.At)
	}

	// Containers nobody asks about are forgotten; removed ones stop being sampled.
	c.mu.Lock()
	c.keep = 0
	c.mu.Unlock()
	if err := fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	var n int
	if !testutil.PollUntil(5*time.Second, 10*time.Millisecond, func() bool {
		c.mu.Lock()
		n = len(c.entries)
		c.mu.Unlock()
		return n == 0
	}) {
		t.Fatalf("%d stats entries kept", n)
	}
}

func TestWritableLayerIsMeasuredLikeDu(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "f"), make([]byte, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a", "f"), filepath.Join(dir, "a", "b", "g")); err != nil {
		t.Fatal(err)
	}
	u, err := WalkUsage(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	// dir, a, b and one file (hard-linked twice).
	if u.Inodes != 4 || u.Bytes < 10000 || !u.HasInodes {
		t.Errorf("usage %+v", u)
	}
	if _, err := WalkUsage(context.Background(), filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing directory")
	}
}

// OnRefresh hears of every refresh as it ends: one that took a sample, one whose stats call
// failed, and none for a container that Docker does not have (forgotten, not failed).
func TestOnRefreshIsToldOfEachRefreshAndWhetherItFailed(t *testing.T) {
	fake := newFake()
	type refresh struct {
		d      time.Duration
		failed bool
	}
	heard := make(chan refresh, 10)
	c := testCollector(t, fake, Config{OnRefresh: func(d time.Duration, failed bool) { heard <- refresh{d, failed} }})
	c.maxAge = 0 // every Collect refreshes
	ctx := context.Background()
	id := startedContainer(t, fake, "observed")
	next := func() refresh {
		t.Helper()
		select {
		case r := <-heard:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("OnRefresh was not called")
			return refresh{}
		}
	}
	if _, ok := c.Collect(ctx, []string{id}, true)[id]; !ok {
		t.Fatal("no sample")
	}
	if r := next(); r.failed || r.d <= 0 {
		t.Errorf("a refresh that took a sample: OnRefresh(%v, failed %v), want a duration and not failed", r.d, r.failed)
	}
	fake.InjectError("ContainerStats", errors.New("daemon busy"))
	c.Collect(ctx, []string{id}, true)
	if r := next(); !r.failed {
		t.Error("a refresh whose stats call failed was not reported failed")
	}
	c.Collect(ctx, []string{"0123456789ab-gone"}, true)
	if r := next(); r.failed {
		t.Error("a refresh of a container Docker does not have was reported failed")
	}
}
