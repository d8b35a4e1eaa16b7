package core

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports the bytes and inodes of image layers and of containers' writable
// layers. With the classic store both live under Docker's root directory, which both name as
// their filesystem; with the containerd store (Docker 29's default) they live under
// containerd's snapshotter root, which containerd reports (layersRoot).
func (s *Service) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	du, at, err := s.diskUsage.get(ctx)
	if err != nil {
		return nil, dockerError(err, "docker disk usage")
	}
	var containerBytes int64
	for _, c := range du.Containers {
		containerBytes += c.SizeRw
	}
	root := s.layers.root(ctx)
	var inodes *runtimeapi.UInt64Value
	if n, ok := s.layers.inodes(ctx, root.walk); ok {
		inodes = &runtimeapi.UInt64Value{Value: n}
	}
	usage := func(used int64) *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{
			Timestamp:  at.UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: root.mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: uint64(max(used, 0))},
			InodesUsed: inodes,
		}
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{usage(du.LayersSize)},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{usage(containerBytes)},
	}, nil
}
