package libdocker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/container"
)

// StatsClient is what container stats and live resource updates need of Docker.
type StatsClient interface {
	// ContainerStats takes one sample of a container's resource usage with Docker's one-shot
	// stats (API 1.41): Docker reads the cgroups once, without the second sample a plain
	// stream=false call waits a second or two for, so PreCPUStats is empty. A container that is
	// not running gives a zero sample with a zero Read time.
	ContainerStats(ctx context.Context, id string) (container.StatsResponse, error)
	// UpdateContainer changes a container's cgroup resources while it runs (docker update).
	// Docker accepts some settings it cannot apply (swap without swap accounting) with
	// warnings only: they are returned.
	UpdateContainer(ctx context.Context, id string, update container.UpdateConfig) (warnings []string, err error)
}

func (c *client) ContainerStats(ctx context.Context, id string) (container.StatsResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerStatsOneShot(ctx, id)
	if err != nil {
		return container.StatsResponse{}, classify(err)
	}
	defer resp.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return container.StatsResponse{}, fmt.Errorf("decode stats of %s: %w", id, err)
	}
	return st, nil
}

func (c *client) UpdateContainer(ctx context.Context, id string, update container.UpdateConfig) ([]string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerUpdate(ctx, id, update)
	return resp.Warnings, classify(err)
}
