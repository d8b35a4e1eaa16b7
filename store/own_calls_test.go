package store

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

// lockingDocker holds a container's lock for the whole of a start, as dockerd does: an inspect
// of a container being started waits until the start is done.
type lockingDocker struct {
	*libdocker.Fake
	startTakes time.Duration
	// waitedOut counts the inspects whose context ended while they waited for a start.
	waitedOut atomic.Int32

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (d *lockingDocker) lock(id string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locks[id] == nil {
		d.locks[id] = &sync.Mutex{}
	}
	return d.locks[id]
}

func (d *lockingDocker) StartContainer(ctx context.Context, id string) error {
	l := d.lock(id)
	l.Lock()
	defer l.Unlock()
	err := d.Fake.StartContainer(ctx, id) // its start event goes out now
	time.Sleep(d.startTakes)
	return err
}

func (d *lockingDocker) InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	l := d.lock(id)
	locked := make(chan struct{})
	go func() { l.Lock(); close(locked) }()
	select {
	case <-locked:
		defer l.Unlock()
		return d.Fake.InspectContainer(ctx, id)
	case <-ctx.Done():
		d.waitedOut.Add(1)
		go func() { <-locked; l.Unlock() }()
		return nil, ctx.Err()
	}
}

// startedOnLockingDocker is a synced store in front of a lockingDocker whose starts take
// 400 ms, with a 100 ms refresh bound, logging to the returned hook.
func startedOnLockingDocker(t *testing.T) (*Store, *lockingDocker, *logtest.Hook) {
	t.Helper()
	old := refreshTimeout
	refreshTimeout = 100 * time.Millisecond
	t.Cleanup(func() { refreshTimeout = old })
	d := &lockingDocker{Fake: newFake(), startTakes: 400 * time.Millisecond, locks: map[string]*sync.Mutex{}}
	logger, hook := logtest.NewNullLogger()
	s := Wrap(d, Options{Label: testLabel, Logger: logrus.NewEntry(logger)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, d, hook
}

// An event for a container while our own call on it runs is not refreshed on its own (that
// inspect would wait for Docker's lock, and time out on a busy node), but by our call when it
// ends; the store stays synced and reads the state after the event.
func TestEventsDuringOurOwnCallAreReadWhenItEnds(t *testing.T) {
	s, d, hook := startedOnLockingDocker(t)
	ctx := context.Background()
	id := create(t, s, "busy", "container")
	if err := s.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, id); st != "running" {
		t.Errorf("state %q after StartContainer, want running", st)
	}
	// The start event's refresh would have timed out behind the start and unsynced the store.
	time.Sleep(200 * time.Millisecond)
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("store warned: %s", e.Message)
		}
	}
	if !s.Synced() {
		t.Error("store not synced after an event during our own start")
	}
	if n := d.waitedOut.Load(); n != 0 {
		t.Errorf("%d inspects waited for our own start until they timed out", n)
	}
	hits := s.Hits()
	if _, err := s.InspectContainer(ctx, id); err != nil || s.Hits() != hits+1 {
		t.Errorf("inspect after the start: err %v, answered from memory %v", err, s.Hits() == hits+1)
	}
}

// The event that came during our call is read after the call's own refresh: a change that
// refresh missed (here, a kill from outside between Docker's answer and our read-back) is not
// lost.
func TestAnEventDuringOurCallIsNotLost(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	id := create(t, s, "raced", "container")
	end := s.own.begin(id)
	if err := fake.StartContainer(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	s.refreshAfter(context.Background(), id) // our call's read-back: running
	if err := fake.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatal(err) // behind our back, before our call ended; its events are deferred
	}
	eventually(t, "the stop's events noted", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return s.own.events[id]
	})
	if st := stateOf(t, s, id); st != "running" {
		t.Fatalf("state %q before our call ended, want the read-back's running", st)
	}
	s.endOwnCall(context.Background(), id, end)
	if st := stateOf(t, s, id); st != "exited" {
		t.Errorf("state %q after our call ended, want exited", st)
	}
	same(t, s, fake, id)
}

// An event refresh that times out behind Docker's lock of a busy container (a start made
// behind our back here) is retried with more patience; the store stays synced and reads the
// container's new state.
func TestARefreshBehindABusyContainerIsRetriedNotARelist(t *testing.T) {
	s, d, hook := startedOnLockingDocker(t)
	ctx := context.Background()
	id := create(t, s, "behind", "container")
	if err := d.StartContainer(ctx, id); err != nil { // not through the store
		t.Fatal(err)
	}
	eventually(t, "the start read", func() bool { return stateOf(t, s, id) == "running" })
	for _, e := range hook.AllEntries() {
		t.Errorf("store logged: %s", e.Message)
	}
	if !s.Synced() {
		t.Error("store not synced after a slow refresh")
	}
}

// An event that came before our call's own refresh was asked (the start event of our own
// start, usually) is read by that refresh: the call does not inspect the container again.
func TestAnEventBeforeOurRefreshIsNotReadTwice(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	id := create(t, s, "ours", "container")
	end := s.own.begin(id)
	if err := fake.StartContainer(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start's event noted", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return s.own.events[id]
	})
	s.refreshAfter(context.Background(), id)
	inspects := fake.Calls("InspectContainer")
	s.endOwnCall(context.Background(), id, end)
	if n := fake.Calls("InspectContainer") - inspects; n != 0 {
		t.Errorf("%d inspects after our call ended, want none: its refresh came after the event", n)
	}
	if st := stateOf(t, s, id); st != "running" {
		t.Errorf("state %q, want running", st)
	}
	same(t, s, fake, id)
}
