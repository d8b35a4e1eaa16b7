package core

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/stats/runscstats"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
)

// Stats collection: the kubelet asks for the stats of every container every few seconds, and
// asking Docker for all of them on each call is what drives dockerd to 200% CPU on busy nodes
// (upstream cri-dockerd issue #135). Instead, one sample per container is kept and refreshed
// in the background at a fixed period, with a bounded number of Docker calls in flight; an
// RPC answers from the samples and asks Docker only for containers it has no fresh sample of.
// The writable layer is measured by walking the container's upper directory at a slower
// period, never with Docker's size inspect.
//
// A cached sample is as good as a fresh one for the first caller that sees it: it is the
// newest reading there is, and that caller has nothing older to compare it with. It is not for
// a caller that asks again: crictl stats/statsp (and anything else that computes a rate from
// two calls) takes two samples a second apart and needs the second one to be newer, as it is
// with containerd and CRI-O, which read the cgroups on every call. So each sample remembers when
// an RPC first returned it, and a sample first returned at least statsMaxAge ago is refreshed
// on demand for the containers asked (through the same single-flight refresh and the same bound
// on Docker calls in flight). The kubelet's 10 s polls stay as cheap as they were: each finds
// the sample the background refresh took since its last poll, one no caller has seen, and
// makes no Docker call; its back-to-back calls of one poll (pod stats, then container stats)
// share one sample. A second poller at another phase (metrics-server between two kubelet polls)
// gets a fresh sample at the cost of one stats call per container, at most one per statsMaxAge,
// and the background refresh then skips the containers it refreshed.
//
// The CRI metrics (metrics.go) read the cache without forcing a refresh and without marking a
// sample seen: every metric carries its sample's timestamp, and scrapers at their own cadence
// would otherwise cost Docker calls per scrape.
const (
	// statsInterval is the background refresh period of a sample.
	statsInterval = 10 * time.Second
	// statsMaxAge is how long after a sample was first returned by an RPC it is returned again;
	// a caller asking later gets a new one. crictl samples one second apart (-s 1, the least).
	statsMaxAge = time.Second
	// statsConcurrency bounds the Docker stats calls in flight. Docker (20.10 at least) answers
	// even one-shot stats from its collector, which samples every subscribed container once per
	// second: calls made together are served by the same tick, calls queued behind a small
	// bound wait a tick each (4 in flight made 50 containers take 13 s). The bound keeps a busy
	// node's refresh to a few ticks without opening hundreds of connections to dockerd.
	statsConcurrency = 32
	// statsKeep stops refreshing a container no RPC asked about for this long.
	statsKeep = 2 * time.Minute
	// fsInterval is how often a writable layer is measured.
	fsInterval = time.Minute
	// statsFetchTimeout bounds one container's refresh, whoever waits for it.
	statsFetchTimeout = 30 * time.Second
)

// statsSample is one reading of a container's cgroups, in the units CRI reports.
type statsSample struct {
	at         time.Time
	running    bool
	cpuTotal   uint64 // ns of CPU time since the container started
	memUsage   uint64
	workingSet uint64 // usage without inactive file cache, what the kubelet evicts on
	rss        uint64
	pageFaults uint64
	majFaults  uint64
	memLimit   uint64
	swap       uint64
	hasSwap    bool
	pids       uint64
	networks   map[string]container.NetworkStats
	// raw is Docker's reading, for the CRI metrics (metrics.go).
	raw *container.StatsResponse
	// io is the cgroup v2 io.stat read with it, for the I/O operations Docker leaves out on v2.
	io []ioStat
	// forMetrics: raw holds the figures only the CRI metrics report (cgroup_stats.go reads them
	// only for containers the metrics asked about within keep; Docker's stats always have them).
	forMetrics bool
}

// fsUsage is a measured writable layer.
type fsUsage struct {
	at     time.Time
	bytes  uint64
	inodes uint64
	// hasInodes is false when the size came from Docker's disk usage, which counts no inodes.
	hasInodes bool
}

// containerMeta is what a container's stats need from one Docker inspect, taken once (again
// after UpdateContainerResources).
type containerMeta struct {
	upperDir string // the overlay2 upper directory: the writable layer
	pid      int
	// runscPath is set for a gVisor container (behind the runc shim): its processes are the
	// sandbox's, which the host's cgroup does not count.
	runscPath   string
	hostNetwork bool
	// ownNetwork: the container has a network namespace of its own (not the host's, not another
	// container's), whose interfaces are its stats' networks.
	ownNetwork bool
	// unifiedDir is the container's cgroup on a cgroup v2 node, "" on v1.
	unifiedDir string
	// cgroups are the container's cgroup directories, where its stats are read (cgroup_stats.go);
	// hasCgroups is false where they cannot be (then Docker is asked).
	cgroups    containerCgroups
	hasCgroups bool
	// beforeStart: taken before the container started (no process yet); taken again.
	beforeStart bool
	// For the CRI metrics: the Docker name and image, the start time and the limits.
	name      string
	image     string
	startedAt time.Time
	resources container.Resources
}

type statsEntry struct {
	cur, prev *statsSample
	// seen is when an RPC first returned cur; zero until one did.
	seen   time.Time
	fs     *fsUsage
	meta   *containerMeta
	wanted time.Time
	// metricsWanted is when the CRI metrics last asked for it (collect without fresh).
	metricsWanted time.Time
	// inflight is closed when the refresh in progress ends; nil when none runs.
	inflight chan struct{}
	lastErr  error
}

// statsSnapshot is what an RPC gets for one container.
type statsSnapshot struct {
	cur, prev *statsSample
	fs        *fsUsage
	meta      *containerMeta
}

// usageNanoCores is the CPU rate between the last two samples; ok is false before there are two.
func (s statsSnapshot) usageNanoCores() (uint64, bool) {
	if s.cur == nil || s.prev == nil || !s.cur.running || !s.prev.running || s.cur.cpuTotal < s.prev.cpuTotal {
		return 0, false
	}
	dt := s.cur.at.Sub(s.prev.at)
	if dt <= 0 {
		return 0, false
	}
	return uint64(float64(s.cur.cpuTotal-s.prev.cpuTotal) / dt.Seconds()), true
}

type statsCollector struct {
	docker     libdocker.Client
	log        *logrus.Entry
	interval   time.Duration
	keep       time.Duration
	fsEvery    time.Duration
	staleAfter time.Duration
	maxAge     time.Duration
	sem        chan struct{}
	// host is where the node's cgroups and processes are (cgroups.go).
	host hostFS
	// snapshotUpperDir finds a container's writable layer where Docker's inspect has none
	// (the containerd image store); "" when unknown. Set by the service.
	snapshotUpperDir func(ctx context.Context, id string) string
	// runscPath is the runsc binary of a HostConfig.Runtime that Docker runs as gVisor behind
	// the runc shim, "" for any other runtime. Set by the service.
	runscPath func(ctx context.Context, runtime string) string
	// runsc reads the task count of such a container from its sandbox.
	runsc runscstats.Reader

	mu      sync.Mutex
	entries map[string]*statsEntry
	running bool
	stop    chan struct{}
	done    chan struct{}
	// sizes is Docker's disk usage, the fallback for writable layers not on overlay2.
	sizes   map[string]int64
	sizesAt time.Time
	sizesMu sync.Mutex
	// memTotal is the node's memory (nodeMemory).
	memTotal     uint64
	memTotalOnce sync.Once
}

func newStatsCollector(docker libdocker.Client, log *logrus.Entry) *statsCollector {
	return &statsCollector{
		docker:     docker,
		log:        log,
		interval:   statsInterval,
		keep:       statsKeep,
		fsEvery:    fsInterval,
		staleAfter: 2 * statsInterval,
		maxAge:     statsMaxAge,
		host:       nodeHostFS(),
		runsc:      runscstats.Reader{Proc: nodeHostFS().proc},
		sem:        make(chan struct{}, statsConcurrency),
		entries:    map[string]*statsEntry{},
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// collect returns a snapshot for each id, refreshing (with bounded concurrency) those without a
// recent sample, and marks them wanted so the background loop keeps them fresh. With fresh (the
// stats RPCs), a sample that an RPC was first given statsMaxAge ago or earlier is refreshed too,
// and the samples returned are marked seen. Without (the CRI metrics), a sample without the
// metrics' figures is refreshed, and the samples of ids keep them for keep. Containers that Docker no longer knows are left
// out; other failures are logged and leave the id out too.
func (c *statsCollector) collect(ctx context.Context, ids []string, fresh bool) map[string]statsSnapshot {
	c.ensureRunning()
	now := time.Now()
	var wait []chan struct{}
	c.mu.Lock()
	for _, id := range ids {
		e := c.entries[id]
		if e == nil {
			e = &statsEntry{}
			c.entries[id] = e
		}
		e.wanted = now
		if !fresh {
			e.metricsWanted = now
		}
		if e.cur != nil && now.Sub(e.cur.at) < c.staleAfter && (!fresh || e.seen.IsZero() || now.Sub(e.seen) < c.maxAge) &&
			(fresh || e.cur.forMetrics) {
			continue
		}
		wait = append(wait, c.startRefreshLocked(id, e))
	}
	c.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return c.snapshots(ids, fresh)
		}
	}
	return c.snapshots(ids, fresh)
}

// snapshots returns the current samples of ids; seen marks those not yet returned as seen now.
func (c *statsCollector) snapshots(ids []string, seen bool) map[string]statsSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	out := make(map[string]statsSnapshot, len(ids))
	for _, id := range ids {
		if e := c.entries[id]; e != nil && e.cur != nil {
			out[id] = statsSnapshot{cur: e.cur, prev: e.prev, fs: e.fs, meta: e.meta}
			if seen && e.seen.IsZero() {
				e.seen = now
			}
		}
	}
	return out
}

// forgetMeta makes the next refresh of id inspect it again, after its resources changed.
func (c *statsCollector) forgetMeta(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.entries {
		if strings.HasPrefix(key, id) {
			e.meta = nil
		}
	}
}

// lastError is the error of the last refresh of id, if it failed.
func (c *statsCollector) lastError(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[id]; e != nil {
		return e.lastErr
	}
	return nil
}

// startRefreshLocked starts a refresh of id unless one runs, and returns the channel closed at
// its end; c.mu must be held.
func (c *statsCollector) startRefreshLocked(id string, e *statsEntry) chan struct{} {
	if e.inflight != nil {
		return e.inflight
	}
	ch := make(chan struct{})
	e.inflight = ch
	meta, fsu := e.meta, e.fs
	forMetrics := !e.metricsWanted.IsZero() && time.Since(e.metricsWanted) <= c.keep
	go func() {
		defer close(ch)
		ctx, cancel := context.WithTimeout(context.Background(), statsFetchTimeout)
		defer cancel()
		var sample *statsSample
		var newMeta *containerMeta
		var newFS *fsUsage
		var err error
		if perr := supervise.Run(c.log, "stats refresh of "+id, func() { sample, newMeta, newFS, err = c.fetch(ctx, id, meta, fsu, forMetrics) }); perr != nil {
			err = perr
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		e.inflight = nil
		e.lastErr = err
		if err != nil {
			if libdocker.IsNotFound(err) {
				delete(c.entries, id)
			} else {
				c.log.WithField("container", id).Debugf("stats: %v", err)
			}
			return
		}
		e.meta, e.fs = newMeta, newFS
		if e.cur != nil && e.cur.running && sample.running {
			e.prev = e.cur
		} else {
			e.prev = nil
		}
		e.cur, e.seen = sample, time.Time{}
	}()
	return ch
}

// fetch takes a sample of id, inspecting it the first time and measuring its writable layer
// when that is older than fsEvery; with forMetrics, one with the figures of the CRI metrics.
func (c *statsCollector) fetch(ctx context.Context, id string, meta *containerMeta, fsu *fsUsage, forMetrics bool) (*statsSample, *containerMeta, *fsUsage, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	if meta == nil || meta.beforeStart {
		inspect, err := c.docker.InspectContainer(ctx, id)
		if err != nil {
			return nil, nil, nil, err
		}
		meta = &containerMeta{}
		if inspect.GraphDriver.Name == "overlay2" {
			meta.upperDir = inspect.GraphDriver.Data["UpperDir"]
		} else if c.snapshotUpperDir != nil {
			meta.upperDir = c.snapshotUpperDir(ctx, id)
		}
		meta.name = strings.TrimPrefix(inspect.Name, "/")
		if inspect.Config != nil {
			meta.image = inspect.Config.Image
		}
		if inspect.State != nil {
			meta.pid = inspect.State.Pid
			meta.startedAt, _ = time.Parse(time.RFC3339Nano, inspect.State.StartedAt)
		}
		if meta.pid > 0 {
			meta.unifiedDir = c.host.unifiedDir(meta.pid)
			meta.cgroups, meta.hasCgroups = c.host.containerCgroupsOf(id, meta.pid)
		}
		if inspect.HostConfig != nil {
			meta.hostNetwork = inspect.HostConfig.NetworkMode.IsHost()
			meta.ownNetwork = !meta.hostNetwork && !inspect.HostConfig.NetworkMode.IsContainer()
			meta.resources = inspect.HostConfig.Resources
			if c.runscPath != nil {
				meta.runscPath = c.runscPath(ctx, inspect.HostConfig.Runtime)
			}
		}
	}
	// The cgroups first (cgroup_stats.go); Docker's stats where they cannot be read.
	var st container.StatsResponse
	direct := false
	if meta.hasCgroups {
		st, direct = c.host.readContainerStats(meta.cgroups, meta.pid, meta.ownNetwork, c.nodeMemory(), forMetrics)
	}
	if !direct {
		var err error
		if st, err = c.docker.ContainerStats(ctx, id); err != nil {
			return nil, nil, nil, err
		}
		if !st.Read.IsZero() && meta.pid == 0 {
			// Inspected before it started: inspect again next time, for its process.
			meta.beforeStart = true
		}
	}
	st.ID = id
	sample := sampleFromDocker(st)
	sample.forMetrics = forMetrics || !direct
	if sample.running && meta.unifiedDir != "" {
		// Docker's stats on cgroup v2 have no swap and no I/O operations (cgroups.go).
		if !sample.hasSwap {
			sample.swap, sample.hasSwap = readCgroupV2Swap(meta.unifiedDir)
		}
		if sample.forMetrics {
			sample.io, _ = readCgroupV2IO(meta.unifiedDir)
		}
	}
	if sample.running && meta.runscPath != "" {
		// The host's pids cgroup counts the Sentry's and the gofer's threads; the kubelet
		// ranks pods by their own processes, as containerd's gVisor shim reports them.
		if n, err := c.runsc.Tasks(ctx, meta.runscPath, meta.pid, id); err == nil {
			sample.pids = n
		} else {
			c.log.WithField("container", id).Debugf("stats: the gVisor sandbox's tasks: %v", err)
		}
	}
	if fsu == nil || time.Since(fsu.at) >= c.fsEvery {
		if measured, err := c.measureWritableLayer(ctx, id, meta.upperDir); err == nil {
			fsu = measured
		} else {
			c.log.WithField("container", id).Debugf("stats: writable layer: %v", err)
		}
	}
	return sample, meta, fsu, nil
}

// nodeMemory is the node's MemTotal, read once: Docker caps a container's memory limit there.
func (c *statsCollector) nodeMemory() uint64 {
	c.memTotalOnce.Do(func() { c.memTotal = c.host.memTotal() })
	return c.memTotal
}

// sampleFromDocker converts Docker's stats (cgroup v1 or v2 key names) into a sample.
func sampleFromDocker(st container.StatsResponse) *statsSample {
	s := &statsSample{at: st.Read, running: !st.Read.IsZero()}
	if !s.running {
		s.at = time.Now()
		return s
	}
	s.cpuTotal = st.CPUStats.CPUUsage.TotalUsage
	m := st.MemoryStats
	stat := func(v1, v2 string) uint64 {
		if v, ok := m.Stats[v1]; ok {
			return v
		}
		return m.Stats[v2]
	}
	s.memUsage = m.Usage
	inactive := stat("total_inactive_file", "inactive_file")
	if s.memUsage > inactive {
		s.workingSet = s.memUsage - inactive
	}
	s.rss = stat("total_rss", "anon")
	s.pageFaults = stat("total_pgfault", "pgfault")
	s.majFaults = stat("total_pgmajfault", "pgmajfault")
	s.memLimit = m.Limit
	if v, ok := m.Stats["total_swap"]; ok {
		s.swap, s.hasSwap = v, true
	} else if v, ok := m.Stats["swap"]; ok {
		s.swap, s.hasSwap = v, true
	}
	s.pids = st.PidsStats.Current
	s.networks = st.Networks
	s.raw = &st
	return s
}

// measureWritableLayer walks an overlay2 upper directory the way du does (allocated blocks,
// hard links once); without one it falls back to Docker's disk usage, taken at most once per
// fsEvery for all containers.
func (c *statsCollector) measureWritableLayer(ctx context.Context, id, upperDir string) (*fsUsage, error) {
	if upperDir != "" {
		if u, err := walkUsage(upperDir); err == nil {
			return u, nil
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return nil, err
		}
	}
	c.sizesMu.Lock()
	defer c.sizesMu.Unlock()
	if c.sizes == nil || time.Since(c.sizesAt) >= c.fsEvery {
		du, err := c.docker.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ContainerObject}})
		if err != nil {
			return nil, err
		}
		c.sizes = make(map[string]int64, len(du.Containers))
		for _, ctr := range du.Containers {
			c.sizes[ctr.ID] = ctr.SizeRw
		}
		c.sizesAt = time.Now()
	}
	size, ok := c.sizes[id]
	if !ok {
		// Created since the disk usage was taken (it is refreshed once per fsEvery): Docker
		// measures this one layer when asked, so a new container has its usage at once.
		rw, err := c.docker.InspectContainerSize(ctx, id)
		if err != nil {
			return nil, err
		}
		c.sizes[id] = rw
		return &fsUsage{at: time.Now(), bytes: uint64(max(rw, 0))}, nil
	}
	return &fsUsage{at: c.sizesAt, bytes: uint64(max(size, 0))}, nil
}

// walkUsage sums the allocated bytes and counts the inodes under dir.
func walkUsage(dir string) (*fsUsage, error) {
	u := &fsUsage{at: time.Now(), hasInodes: true}
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a file removed during the walk
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			u.bytes += uint64(max(info.Size(), 0))
			u.inodes++
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		u.bytes += uint64(st.Blocks) * 512
		u.inodes++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// ensureRunning starts the background refresh on first use.
func (c *statsCollector) ensureRunning() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return
	}
	select {
	case <-c.stop:
		return // closed
	default:
	}
	c.running = true
	go c.loop()
}

// loop refreshes, every interval, the containers an RPC asked about within keep, and forgets
// the others.
func (c *statsCollector) loop() {
	defer close(c.done)
	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-ticker.C:
		}
		c.tick(time.Now())
	}
}

// tick is one round of the background refresh at now (a parameter, so that tests can run a
// round at any point of a sample's life without waiting for the ticker).
func (c *statsCollector) tick(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.entries {
		if now.Sub(e.wanted) > c.keep {
			if e.inflight == nil {
				delete(c.entries, id)
			}
			continue
		}
		// Refresh a little ahead so that an RPC between two ticks finds a fresh sample.
		if e.cur == nil || now.Sub(e.cur.at) >= c.interval/2 {
			c.startRefreshLocked(id, e)
		}
	}
}

// close stops the background refresh.
func (c *statsCollector) close() {
	c.mu.Lock()
	select {
	case <-c.stop:
		c.mu.Unlock()
		return
	default:
	}
	close(c.stop)
	running := c.running
	c.mu.Unlock()
	if running {
		<-c.done
	}
}
