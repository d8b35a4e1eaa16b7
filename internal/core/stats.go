package core

import (
	"context"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// newStats builds the service's stats collector on cfg, with what only the service knows: its
// Docker client (unless cfg has one), where the containerd store keeps writable layers, and which
// runtimes are gVisor's.
func (s *Service) newStats(cfg stats.Config) *stats.Collector {
	if cfg.Docker == nil {
		cfg.Docker = s.docker
	}
	cfg.Log = s.log
	cfg.OnRefresh = s.opts.StatsRefreshed
	cfg.SnapshotUpperDir = s.layers.snapshotUpperDir
	cfg.RunscPath = func(ctx context.Context, runtime string) string {
		info, err := s.runtimes.get(ctx)
		if err != nil {
			return ""
		}
		return info.runscPath(runtime)
	}
	return stats.New(cfg)
}
