// Package stats samples the CPU, memory, processes, network and writable layer of running
// containers for the CRI stats and metrics RPCs: from their cgroups where it can, from Docker
// where it cannot, kept fresh in the background so that the kubelet's polls cost no Docker call.
package stats

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/fswalk"
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
// The CRI metrics (core's metrics.go) read the cache without forcing a refresh and without marking a
// sample seen: every metric carries its sample's timestamp, and scrapers at their own cadence
// would otherwise cost Docker calls per scrape.
const (
	// statsInterval is the background refresh period of a sample.
	statsInterval = 10 * time.Second
	// statsMaxAge is how long after a sample was first returned by an RPC it is returned again;
	// a caller asking later gets a new one. crictl samples one second apart (-s 1, the least).
	statsMaxAge = time.Second
	// Concurrency bounds the Docker stats calls in flight. Docker (20.10 at least) answers
	// even one-shot stats from its collector, which samples every subscribed container once per
	// second: calls made together are served by the same tick, calls queued behind a small
	// bound wait a tick each (4 in flight made 50 containers take 13 s). The bound keeps a busy
	// node's refresh to a few ticks without opening hundreds of connections to dockerd.
	Concurrency = 32
	// statsKeep stops refreshing a container no RPC asked about for this long.
	statsKeep = 2 * time.Minute
	// fsInterval is how often a writable layer is measured.
	fsInterval = time.Minute
	// statsFetchTimeout bounds one container's refresh, whoever waits for it.
	statsFetchTimeout = 30 * time.Second
)

// Sample is one reading of a container's cgroups, in the units CRI reports.
type Sample struct {
	At         time.Time
	Running    bool
	CPUTotal   uint64 // ns of CPU time since the container started
	MemUsage   uint64
	WorkingSet uint64 // usage without inactive file cache, what the kubelet evicts on
	RSS        uint64
	PageFaults uint64
	MajFaults  uint64
	MemLimit   uint64
	Swap       uint64
	HasSwap    bool
	Pids       uint64
	Networks   map[string]container.NetworkStats
	// Raw is Docker's reading, for the CRI metrics.
	Raw *container.StatsResponse
	// IO is the cgroup v2 io.stat read with it, for the I/O operations Docker leaves out on v2.
	IO []IOStat
	// PSI is the cgroup v2 pressure read with it (Docker reports none); nil on v1.
	PSI *PSI
	// forMetrics: Raw holds the figures only the CRI metrics report (cgroup_stats.go reads them
	// only for containers the metrics asked about within keep; Docker's stats always have them).
	forMetrics bool
}

// FSUsage is a measured writable layer.
type FSUsage struct {
	At     time.Time
	Bytes  uint64
	Inodes uint64
	// HasInodes is false when the size came from Docker's disk usage, which counts no inodes.
	HasInodes bool
}

// Meta is what a container's stats need from one Docker inspect, taken once (again
// after UpdateContainerResources).
type Meta struct {
	upperDir string // the overlay2 upper directory: the writable layer
	Pid      int
	// runscPath is set for a gVisor container (behind the runc shim): its processes are the
	// sandbox's, which the host's cgroup does not count.
	runscPath   string
	HostNetwork bool
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
	Name      string
	Image     string
	StartedAt time.Time
	Resources container.Resources
}

type statsEntry struct {
	cur, prev *Sample
	// seen is when an RPC first returned cur; zero until one did.
	seen   time.Time
	fs     *FSUsage
	meta   *Meta
	wanted time.Time
	// metricsWanted is when the CRI metrics last asked for it (collect without fresh).
	metricsWanted time.Time
	// inflight is closed when the refresh in progress ends; nil when none runs.
	inflight chan struct{}
	lastErr  error
}

// Snapshot is what an RPC gets for one container.
type Snapshot struct {
	Cur, Prev *Sample
	FS        *FSUsage
	Meta      *Meta
}

// UsageNanoCores is the CPU rate between the last two samples; ok is false before there are two.
func (s Snapshot) UsageNanoCores() (uint64, bool) {
	if s.Cur == nil || s.Prev == nil || !s.Cur.Running || !s.Prev.Running || s.Cur.CPUTotal < s.Prev.CPUTotal {
		return 0, false
	}
	dt := s.Cur.At.Sub(s.Prev.At)
	if dt <= 0 {
		return 0, false
	}
	return uint64(float64(s.Cur.CPUTotal-s.Prev.CPUTotal) / dt.Seconds()), true
}

// Collector keeps a sample of each container an RPC asked about, refreshed in the background.
type Collector struct {
	docker     libdocker.Client
	log        *logrus.Entry
	interval   time.Duration
	keep       time.Duration
	fsEvery    time.Duration
	staleAfter time.Duration
	maxAge     time.Duration
	ticks      <-chan time.Time // Config.Ticks
	sem        chan struct{}
	// host is where the node's cgroups and processes are (cgroups.go).
	host Host
	// snapshotUpperDir finds a container's writable layer where Docker's inspect has none
	// (the containerd image store); "" when unknown.
	snapshotUpperDir func(ctx context.Context, id string) string
	// runscPath is the runsc binary of a HostConfig.Runtime that Docker runs as gVisor behind
	// the runc shim, "" for any other runtime.
	runscPath func(ctx context.Context, runtime string) string
	// runsc reads the task count of such a container from its sandbox.
	runsc runscstats.Reader
	// onRefresh is Config.OnRefresh.
	onRefresh func(d time.Duration, failed bool)

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

// Config is what a Collector works with. Zero fields take the defaults.
type Config struct {
	Docker libdocker.Client
	Log    *logrus.Entry
	// SnapshotUpperDir finds a container's writable layer where Docker's inspect has none
	// (the containerd image store); "" when unknown.
	SnapshotUpperDir func(ctx context.Context, id string) string
	// RunscPath is the runsc binary of a HostConfig.Runtime that Docker runs as gVisor behind
	// the runc shim, "" for any other runtime.
	RunscPath func(ctx context.Context, runtime string) string
	// Host is where the node's /sys and /proc are; the zero Host is the node's own.
	Host Host
	// Runsc reads the task counts of gVisor sandboxes; nil is runsc on Host's /proc.
	Runsc *runscstats.Reader
	// Interval is the background refresh period, MaxAge how long after an RPC first got a
	// sample another gets it too, StaleAfter when a sample is too old for any RPC, Keep how
	// long a container no RPC asks about is refreshed. Tests shorten them.
	Interval, MaxAge, StaleAfter, Keep time.Duration
	// Ticks, when set, is the background refresh's clock in place of a ticker at Interval: a
	// round runs at each time received. Tests send them.
	Ticks <-chan time.Time
	// OnRefresh, when set, is told of each container's refresh as it ends: how long it took
	// (the wait for one of the Concurrency slots included) and whether it failed. A container
	// that Docker no longer has is no failure: it is forgotten.
	OnRefresh func(d time.Duration, failed bool)
}

// New returns a Collector; its background refresh starts with the first Collect.
func New(cfg Config) *Collector {
	c := &Collector{
		docker:           cfg.Docker,
		log:              cfg.Log,
		interval:         statsInterval,
		keep:             statsKeep,
		fsEvery:          fsInterval,
		staleAfter:       2 * statsInterval,
		maxAge:           statsMaxAge,
		host:             nodeHost(),
		snapshotUpperDir: cfg.SnapshotUpperDir,
		runscPath:        cfg.RunscPath,
		onRefresh:        cfg.OnRefresh,
		ticks:            cfg.Ticks,
		sem:              make(chan struct{}, Concurrency),
		entries:          map[string]*statsEntry{},
		stop:             make(chan struct{}),
		done:             make(chan struct{}),
	}
	if cfg.Host != (Host{}) {
		c.host = cfg.Host
	}
	c.runsc = runscstats.Reader{Proc: c.host.proc}
	if cfg.Runsc != nil {
		c.runsc = *cfg.Runsc
	}
	for _, d := range []struct {
		set time.Duration
		to  *time.Duration
	}{{cfg.Interval, &c.interval}, {cfg.MaxAge, &c.maxAge}, {cfg.StaleAfter, &c.staleAfter}, {cfg.Keep, &c.keep}} {
		if d.set != 0 {
			*d.to = d.set
		}
	}
	return c
}

// Host is where the collector reads the node's cgroups and processes.
func (c *Collector) Host() Host { return c.host }

// Collect returns a snapshot for each id, refreshing (with bounded concurrency) those without a
// recent sample, and marks them wanted so the background loop keeps them fresh. With fresh (the
// stats RPCs), a sample that an RPC was first given statsMaxAge ago or earlier is refreshed too,
// and the samples returned are marked seen. Without (the CRI metrics), a sample without the
// metrics' figures is refreshed, and the samples of ids keep them for keep. Containers that Docker no longer knows are left
// out; other failures are logged and leave the id out too.
func (c *Collector) Collect(ctx context.Context, ids []string, fresh bool) map[string]Snapshot {
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
		if e.cur != nil && now.Sub(e.cur.At) < c.staleAfter && (!fresh || e.seen.IsZero() || now.Sub(e.seen) < c.maxAge) &&
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
func (c *Collector) snapshots(ids []string, seen bool) map[string]Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	out := make(map[string]Snapshot, len(ids))
	for _, id := range ids {
		if e := c.entries[id]; e != nil && e.cur != nil {
			out[id] = Snapshot{Cur: e.cur, Prev: e.prev, FS: e.fs, Meta: e.meta}
			if seen && e.seen.IsZero() {
				e.seen = now
			}
		}
	}
	return out
}

// ForgetMeta makes the next refresh of id inspect it again, after its resources changed.
func (c *Collector) ForgetMeta(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.entries {
		if strings.HasPrefix(key, id) {
			e.meta = nil
		}
	}
}

// LastError is the error of the last refresh of id, if it failed.
func (c *Collector) LastError(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[id]; e != nil {
		return e.lastErr
	}
	return nil
}

// startRefreshLocked starts a refresh of id unless one runs, and returns the channel closed at
// its end; c.mu must be held.
func (c *Collector) startRefreshLocked(id string, e *statsEntry) chan struct{} {
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
		var sample *Sample
		var newMeta *Meta
		var newFS *FSUsage
		var err error
		began := time.Now()
		if perr := supervise.Run(c.log, "stats refresh of "+id, func() { sample, newMeta, newFS, err = c.fetch(ctx, id, meta, fsu, forMetrics) }); perr != nil {
			err = perr
		}
		if c.onRefresh != nil {
			c.onRefresh(time.Since(began), err != nil && !libdocker.IsNotFound(err))
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
		if e.cur != nil && e.cur.Running && sample.Running {
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
func (c *Collector) fetch(ctx context.Context, id string, meta *Meta, fsu *FSUsage, forMetrics bool) (*Sample, *Meta, *FSUsage, error) {
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
		meta = &Meta{}
		if inspect.GraphDriver.Name == "overlay2" {
			meta.upperDir = inspect.GraphDriver.Data["UpperDir"]
		} else if c.snapshotUpperDir != nil {
			meta.upperDir = c.snapshotUpperDir(ctx, id)
		}
		meta.Name = strings.TrimPrefix(inspect.Name, "/")
		if inspect.Config != nil {
			meta.Image = inspect.Config.Image
		}
		if inspect.State != nil {
			meta.Pid = inspect.State.Pid
			meta.StartedAt, _ = time.Parse(time.RFC3339Nano, inspect.State.StartedAt)
		}
		if meta.Pid > 0 {
			meta.unifiedDir = c.host.unifiedDir(meta.Pid)
			meta.cgroups, meta.hasCgroups = c.host.containerCgroupsOf(id, meta.Pid)
		}
		if inspect.HostConfig != nil {
			meta.HostNetwork = inspect.HostConfig.NetworkMode.IsHost()
			meta.ownNetwork = !meta.HostNetwork && !inspect.HostConfig.NetworkMode.IsContainer()
			meta.Resources = inspect.HostConfig.Resources
			if c.runscPath != nil {
				meta.runscPath = c.runscPath(ctx, inspect.HostConfig.Runtime)
			}
		}
	}
	// The cgroups first (cgroup_stats.go); Docker's stats where they cannot be read.
	var st container.StatsResponse
	direct := false
	if meta.hasCgroups {
		st, direct = c.host.readContainerStats(meta.cgroups, meta.Pid, meta.ownNetwork, c.nodeMemory(), forMetrics)
	}
	if !direct {
		var err error
		if st, err = c.docker.ContainerStats(ctx, id); err != nil {
			return nil, nil, nil, err
		}
		if !st.Read.IsZero() && meta.Pid == 0 {
			// Inspected before it started: inspect again next time, for its process.
			meta.beforeStart = true
		}
	}
	st.ID = id
	sample := sampleFromDocker(st)
	sample.forMetrics = forMetrics || !direct
	if sample.Running && meta.unifiedDir != "" {
		// Docker's stats on cgroup v2 have no swap and no I/O operations (cgroups.go).
		if !sample.HasSwap {
			sample.Swap, sample.HasSwap = readCgroupV2Swap(meta.unifiedDir)
		}
		if sample.forMetrics {
			sample.IO, _ = readCgroupV2IO(meta.unifiedDir)
		}
		sample.PSI = readCgroupV2PSI(meta.unifiedDir)
	}
	if sample.Running && meta.runscPath != "" {
		// The host's pids cgroup counts the Sentry's and the gofer's threads; the kubelet
		// ranks pods by their own processes, as containerd's gVisor shim reports them.
		if n, err := c.runsc.Tasks(ctx, meta.runscPath, meta.Pid, id); err == nil {
			sample.Pids = n
		} else {
			c.log.WithField("container", id).Debugf("stats: the gVisor sandbox's tasks: %v", err)
		}
	}
	if fsu == nil || time.Since(fsu.At) >= c.fsEvery {
		if measured, err := c.measureWritableLayer(ctx, id, meta.upperDir); err == nil {
			fsu = measured
		} else {
			c.log.WithField("container", id).Debugf("stats: writable layer: %v", err)
		}
	}
	return sample, meta, fsu, nil
}

// nodeMemory is the node's MemTotal, read once: Docker caps a container's memory limit there.
func (c *Collector) nodeMemory() uint64 {
	c.memTotalOnce.Do(func() { c.memTotal = c.host.memTotal() })
	return c.memTotal
}

// sampleFromDocker converts Docker's stats (cgroup v1 or v2 key names) into a sample.
func sampleFromDocker(st container.StatsResponse) *Sample {
	s := &Sample{At: st.Read, Running: !st.Read.IsZero()}
	if !s.Running {
		s.At = time.Now()
		return s
	}
	s.CPUTotal = st.CPUStats.CPUUsage.TotalUsage
	m := st.MemoryStats
	stat := func(v1, v2 string) uint64 {
		if v, ok := m.Stats[v1]; ok {
			return v
		}
		return m.Stats[v2]
	}
	s.MemUsage = m.Usage
	inactive := stat("total_inactive_file", "inactive_file")
	if s.MemUsage > inactive {
		s.WorkingSet = s.MemUsage - inactive
	}
	s.RSS = stat("total_rss", "anon")
	s.PageFaults = stat("total_pgfault", "pgfault")
	s.MajFaults = stat("total_pgmajfault", "pgmajfault")
	s.MemLimit = m.Limit
	if v, ok := m.Stats["total_swap"]; ok {
		s.Swap, s.HasSwap = v, true
	} else if v, ok := m.Stats["swap"]; ok {
		s.Swap, s.HasSwap = v, true
	}
	s.Pids = st.PidsStats.Current
	s.Networks = st.Networks
	s.Raw = &st
	return s
}

// measureWritableLayer walks an overlay2 upper directory the way du does (allocated blocks,
// hard links once); without one it falls back to Docker's disk usage, taken at most once per
// fsEvery for all containers.
func (c *Collector) measureWritableLayer(ctx context.Context, id, upperDir string) (*FSUsage, error) {
	if upperDir != "" {
		// Docker measures a layer deeper than our walk goes: a pod cannot hide its usage so.
		if u, err := WalkUsage(ctx, upperDir); err == nil {
			return u, nil
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, fswalk.ErrTooDeep) {
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
		return &FSUsage{At: time.Now(), Bytes: uint64(max(rw, 0))}, nil
	}
	return &FSUsage{At: c.sizesAt, Bytes: uint64(max(size, 0))}, nil
}

// WalkUsage sums the allocated bytes and counts the inodes under dir, dir included. A
// container owns what its writable layer holds and may swap it while we walk: the walk is
// fswalk's, beneath descriptors, so a directory swapped for a symlink to / sends it nowhere.
func WalkUsage(ctx context.Context, dir string) (*FSUsage, error) {
	u := &FSUsage{At: time.Now(), HasInodes: true}
	var root syscall.Stat_t
	if err := syscall.Lstat(dir, &root); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	u.Bytes, u.Inodes = uint64(root.Blocks)*512, 1
	seen := map[uint64]bool{}
	err := fswalk.Walk(ctx, dir, func(e *fswalk.Entry) error {
		if e.Stat.Nlink > 1 && e.Stat.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			if seen[e.Stat.Ino] {
				return nil
			}
			seen[e.Stat.Ino] = true
		}
		u.Bytes += uint64(e.Stat.Blocks) * 512
		u.Inodes++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// ensureRunning starts the background refresh on first use.
func (c *Collector) ensureRunning() {
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
func (c *Collector) loop() {
	defer close(c.done)
	ticks := c.ticks
	if ticks == nil {
		ticker := time.NewTicker(c.interval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	for {
		select {
		case <-c.stop:
			return
		case now := <-ticks:
			if c.ticks == nil {
				now = time.Now() // a late tick's round is at its own time, not the ticker's
			}
			c.tick(now)
		}
	}
}

// tick is one round of the background refresh at now (a parameter, so that tests can run a
// round at any point of a sample's life without waiting for the ticker).
func (c *Collector) tick(now time.Time) {
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
		if e.cur == nil || now.Sub(e.cur.At) >= c.interval/2 {
			c.startRefreshLocked(id, e)
		}
	}
}

// Close stops the background refresh.
func (c *Collector) Close() {
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
