package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
)

// Container logs, for now as upstream cri-dockerd does: the kubelet's log path is a symlink to
// Docker's json-file log, which the kubelet's log reader understands. It goes away with the
// container.

// linkContainerLog points the container's CRI log path at Docker's log file.
func (s *Service) linkContainerLog(c *container.InspectResponse) {
	path := c.Config.Labels[containerLogPathLabel]
	if path == "" || c.LogPath == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		s.log.WithField("id", c.ID).Warnf("container log directory: %v", err)
		return
	}
	// A restarted container (a new attempt) may find its predecessor's link.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		_ = os.Remove(path)
	}
	if err := os.Symlink(c.LogPath, path); err != nil && !errors.Is(err, os.ErrExist) {
		s.log.WithField("id", c.ID).Warnf("link container log %s -> %s: %v", path, c.LogPath, err)
	}
}

// unlinkContainerLog removes the link that linkContainerLog made, and nothing else.
func unlinkContainerLog(labels map[string]string) {
	path := labels[containerLogPathLabel]
	if path == "" {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		_ = os.Remove(path)
	}
}

// linkLogAfterStart inspects a started container once to learn its Docker log file.
func (s *Service) linkLogAfterStart(ctx context.Context, id string) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil || c.Config == nil {
		return
	}
	s.linkContainerLog(c)
}
