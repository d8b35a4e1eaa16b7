package core

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/api/types"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker/containerdroot"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// diskUsageCache holds Docker's disk usage: computing it walks every layer, far too slow to do
// on each of the kubelet's ImageFsInfo calls. Refreshes are single-flight.
type diskUsageCache struct {
	docker libdocker.Client
	maxAge time.Duration

	mu      sync.Mutex
	fetched time.Time
	usage   types.DiskUsage
}

// diskUsageMaxAge is how long Docker's disk usage is answered again: 30 s, as upstream
// cri-dockerd. Docker sums every container's writable layer for it, and the kubelet asks every
// 10 s (its eviction manager); its image garbage collection looks every 5 min.
const diskUsageMaxAge = 30 * time.Second

func newDiskUsageCache(docker libdocker.Client, maxAge time.Duration) *diskUsageCache {
	return &diskUsageCache{docker: docker, maxAge: maxAge}
}

func (c *diskUsageCache) get(ctx context.Context) (types.DiskUsage, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.fetched) < c.maxAge {
		return c.usage, c.fetched, nil
	}
	du, err := c.docker.DiskUsage(ctx, types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject, types.ContainerObject}})
	if err != nil {
		return types.DiskUsage{}, time.Time{}, err
	}
	c.usage, c.fetched = du, time.Now()
	return du, c.fetched, nil
}

// layersDir is where an engine keeps image layers and writable layers: mountpoint names the
// filesystem to the kubelet, walk is the directory whose inodes are the layers'.
type layersDir struct{ mountpoint, walk string }

// layersRoots finds and remembers the layers' directory, and counts its inodes in the
// background at most every inodeCountAge: a walk of every layer file is far too slow for each
// of the kubelet's calls, and a statfs counts the whole filesystem's, not the layers'.
type layersRoots struct {
	service *Service
	// snapshotterRoot and upperDir ask containerd (containerdroot; replaced in tests).
	snapshotterRoot func(ctx context.Context, address, snapshotter string) (string, error)
	upperDir        func(ctx context.Context, address, ns, snapshotter, key string) (string, error)

	mu        sync.Mutex
	known     layersDir
	knownAt   time.Time
	count     map[string]inodeCount
	inflight  map[string]chan struct{}
	countsAge time.Duration
}

const (
	inodeCountAge = 5 * time.Minute
	// firstCountWait bounds how long a call waits for the first count; it answers without
	// inodes if the walk takes longer, and the count comes with a later call.
	firstCountWait = 2 * time.Second
)

type inodeCount struct {
	n  uint64
	at time.Time
}

func newLayersRoots(s *Service) *layersRoots {
	return &layersRoots{service: s, snapshotterRoot: containerdroot.SnapshotterRoot, upperDir: containerdroot.UpperDir, count: map[string]inodeCount{}, inflight: map[string]chan struct{}{}, countsAge: inodeCountAge}
}

// root is the layers' directory of the engine, from the cached /info; containerd is asked
// again at most once a minute (its root changes only with its configuration).
func (l *layersRoots) root(ctx context.Context) layersDir {
	info, err := l.service.runtimes.get(ctx)
	if err != nil {
		return layersDir{mountpoint: "/var/lib/docker", walk: "/var/lib/docker"}
	}
	classic := layersDir{mountpoint: info.DockerRootDir, walk: filepath.Join(info.DockerRootDir, info.Driver)}
	if !containerdImageStore(info.Info) {
		return classic
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.known.walk != "" && time.Since(l.knownAt) < time.Minute {
		return l.known
	}
	l.knownAt = time.Now()
	address := ""
	if info.Containerd != nil {
		address = info.Containerd.Address
	}
	rootDir, err := l.snapshotterRoot(ctx, address, info.Driver)
	if err != nil {
		l.service.warnOnce("containerd-root", "image filesystem: %v; reporting Docker's root directory %s instead of containerd's", err, info.DockerRootDir)
		l.known = layersDir{mountpoint: info.DockerRootDir, walk: info.DockerRootDir}
		return l.known
	}
	l.known = layersDir{mountpoint: rootDir, walk: rootDir}
	return l.known
}

// snapshotUpperDir is the upper directory of a container's writable snapshot with the
// containerd image store (Docker names it after the container), so that its writable layer
// is measured with inodes, as overlay2's is; "" with the classic store or when containerd
// cannot say (Docker's size of the container stands in then).
func (l *layersRoots) snapshotUpperDir(ctx context.Context, id string) string {
	info, err := l.service.runtimes.get(ctx)
	if err != nil || !containerdImageStore(info.Info) || info.Containerd == nil {
		return ""
	}
	upper, err := l.upperDir(ctx, info.Containerd.Address, info.Containerd.Namespaces.Containers, info.Driver, id)
	if err != nil {
		l.service.log.WithField("id", id).Debugf("writable layer: %v", err)
		return ""
	}
	return upper
}

// inodes is the number of inodes under dir (hard links counted once): the last count, while a
// newer one is taken when it is older than inodeCountAge; the first count is waited for up to
// firstCountWait.
func (l *layersRoots) inodes(ctx context.Context, dir string) (uint64, bool) {
	l.mu.Lock()
	c, ok := l.count[dir]
	if ok && time.Since(c.at) < l.countsAge {
		l.mu.Unlock()
		return c.n, true
	}
	done, running := l.inflight[dir]
	if !running {
		done = make(chan struct{})
		l.inflight[dir] = done
		go supervise.Run(l.service.log, "inode count of "+dir, func() {
			n, err := countInodes(dir)
			l.mu.Lock()
			if err == nil {
				l.count[dir] = inodeCount{n: n, at: time.Now()}
			}
			delete(l.inflight, dir)
			l.mu.Unlock()
			close(done)
		})
	}
	l.mu.Unlock()
	if ok {
		return c.n, true // the stale count meanwhile
	}
	wait := time.NewTimer(firstCountWait)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
		return 0, false
	case <-ctx.Done():
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok = l.count[dir]
	return c.n, ok
}

// countInodes counts the inodes under dir as the writable layers' walk does (walkUsage: hard
// links once); a directory that does not exist holds none.
func countInodes(dir string) (uint64, error) {
	u, err := stats.WalkUsage(context.Background(), dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return u.Inodes, nil
}
