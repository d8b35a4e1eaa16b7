package libdocker

import (
	"context"

	"github.com/docker/docker/api/types/checkpoint"
)

// CheckpointClient checkpoints running containers with CRIU (Docker's experimental
// checkpoints; CRIU must be on dockerd's node).
type CheckpointClient interface {
	// CheckpointContainer dumps running container id's processes into dir/name with CRIU
	// and leaves the container running.
	CheckpointContainer(ctx context.Context, id, name, dir string) error
}

func (c *client) CheckpointContainer(ctx context.Context, id, name, dir string) error {
	// No request timeout of ours: the caller bounds the dump (the kubelet's timeout).
	return classify(c.api.CheckpointCreate(ctx, id, checkpoint.CreateOptions{CheckpointID: name, CheckpointDir: dir, Exit: false}))
}
