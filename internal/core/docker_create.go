package core

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// cleanupTimeout bounds the removal of what a failed call created; it runs even when the
// caller's context is already done, so nothing is left behind.
const cleanupTimeout = 30 * time.Second

// abandonedCreate starts the debug line logged when a create's caller gives up mid-create.
const abandonedCreate = "the caller gave up while Docker creates the container"

// createContainer creates a container, retrying once with a randomised name when the name is
// taken (a container Docker has not finished removing, or a leftover of a crash). Docker goes on
// creating when the caller gives up, and its answer is the only news of the new ID: so the
// create runs to its end under libdocker's own bound, and what it made for a caller that has
// gone is removed.
func (s *Service) createContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	createCtx := context.WithoutCancel(ctx)
	// Said when it happens, not once Docker answers: the log tells why a container appears
	// and goes, and tests know the daemon saw the caller leave.
	stopTelling := context.AfterFunc(ctx, func() {
		s.log.WithField("name", name).Debugf("%s; what Docker makes is removed once it answers", abandonedCreate)
	})
	defer stopTelling()
	id, err := s.docker.CreateContainer(createCtx, name, cfg, hc)
	if libdocker.IsConflict(err) && ctx.Err() == nil {
		s.log.WithField("name", name).Warnf("container name in use, creating with a random suffix: %v", err)
		id, err = s.docker.CreateContainer(createCtx, randomizeName(name), cfg, hc)
	}
	if err == nil && ctx.Err() != nil {
		s.removeAfterFailure(ctx, id)
		return "", fmt.Errorf("create container %q: the caller gave up: %w", name, ctx.Err())
	}
	return id, err
}

// removeAfterFailure removes a container a failed RPC created, whatever the caller's context.
func (s *Service) removeAfterFailure(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.docker.RemoveContainer(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !libdocker.IsNotFound(err) {
		s.log.WithField("id", id).Errorf("remove container after a failed call: %v", err)
	}
}
