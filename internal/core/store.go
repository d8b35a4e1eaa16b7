package core

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
)

// ContainerStore is what core needs of the container store (package store, Options.Store).
type ContainerStore interface {
	// libdocker.Client answers container inspects and lists from memory once the store is
	// synced; every other call goes on to Docker.
	libdocker.Client
	// Docker is the client behind the store, for reads that must not come from memory (the
	// store may not have seen a change yet).
	Docker() libdocker.Client
	// ListGeneration changes whenever ListContainers could answer differently; fromMemory
	// says whether lists come from memory (what is built from a list may be kept only then).
	ListGeneration() (gen uint64, fromMemory bool)
	// Refresh brings the store's copy of a container up to Docker's.
	Refresh(ctx context.Context, id string) error
	// Subscribe tells each change of a tracked container the store learns, in order, and
	// after each of its relists what changed while it did not follow Docker's events.
	Subscribe() *store.Subscription
	// Resync makes the store relist, for a subscriber that could not act on a change.
	Resync()
}

var _ ContainerStore = (*store.Store)(nil)

// eventsOnlyStore is the store core follows Docker's events with when Options.Store is nil:
// it reads nothing from memory, and core's calls go to Docker directly.
func eventsOnlyStore(docker libdocker.Client, log *logrus.Entry) *store.Store {
	return store.Wrap(docker, store.Options{Label: TrackedLabel, Logger: log, EventsOnly: true})
}
