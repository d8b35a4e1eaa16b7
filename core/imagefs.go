package core

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
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

// ImageFsInfo reports the bytes of image layers and of containers' writable layers. Both live
// under Docker's root directory, so both name it as their filesystem.
func (s *Service) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return nil, dockerError(err, "docker info")
	}
	du, at, err := s.diskUsage.get(ctx)
	if err != nil {
		return nil, dockerError(err, "docker disk usage")
	}
	var containerBytes int64
	for _, c := range du.Containers {
		containerBytes += c.SizeRw
	}
	var inodes *runtimeapi.UInt64Value
	var st syscall.Statfs_t
	if err := syscall.Statfs(info.DockerRootDir, &st); err == nil {
		inodes = &runtimeapi.UInt64Value{Value: st.Files - st.Ffree}
	}
	fs := func(used int64) *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{
			Timestamp:  at.UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: info.DockerRootDir},
			UsedBytes:  &runtimeapi.UInt64Value{Value: uint64(max(used, 0))},
			InodesUsed: inodes,
		}
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{fs(du.LayersSize)},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{fs(containerBytes)},
	}, nil
}
