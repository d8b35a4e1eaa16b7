package testutil

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// ContainerRunner is the part of a Docker client RunningContainer uses; libdocker's Fake has
// it. An interface, so that libdocker's own tests can use this package without a cycle.
type ContainerRunner interface {
	CreateContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
}

// RunningContainer creates the container name from cfg and hc on d and starts it, ending the
// test on an error, and returns its ID.
func RunningContainer(t testing.TB, d ContainerRunner, name string, cfg *container.Config, hc *container.HostConfig) string {
	t.Helper()
	ctx := context.Background()
	id, err := d.CreateContainer(ctx, name, cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}
