package store

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
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
	createEnded(t, s, id)
	call := s.own.begin(id)
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
		return len(s.own.came[id]) > 0
	})
	if st := stateOf(t, s, id); st != "running" {
		t.Fatalf("state %q before our call ended, want the read-back's running", st)
	}
	s.endOwnCall(context.Background(), call, true)
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
	createEnded(t, s, id)
	call := s.own.begin(id)
	if err := fake.StartContainer(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start's event noted", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return len(s.own.came[id]) > 0
	})
	s.refreshAfter(context.Background(), id)
	inspects := fake.Calls("InspectContainer")
	s.endOwnCall(context.Background(), call, true)
	if n := fake.Calls("InspectContainer") - inspects; n != 0 {
		t.Errorf("%d inspects after our call ended, want none: its refresh came after the event", n)
	}
	if st := stateOf(t, s, id); st != "running" {
		t.Errorf("state %q, want running", st)
	}
	same(t, s, fake, id)
}

// The events Docker sends for our own call (its echoes) cost no second inspect after the call
// succeeded, whenever they come; any other event does, and so does an echo after a failed call.
func TestOurCallsEchoesAreNotReadTwice(t *testing.T) {
	ev := func(a events.Action) events.Message {
		return events.Message{Action: a, Actor: events.Actor{ID: "c1", Attributes: map[string]string{"name": "n"}}}
	}
	for _, tc := range []struct {
		name      string
		echoes    []events.Action
		came      []events.Action
		succeeded bool
		again     bool
	}{
		{"our start's start event", []events.Action{events.ActionStart}, []events.Action{events.ActionStart}, true, false},
		{"a die as it starts", []events.Action{events.ActionStart}, []events.Action{events.ActionStart, events.ActionDie}, true, true},
		{"a start event after a failed start", []events.Action{events.ActionStart}, []events.Action{events.ActionStart}, false, true},
		{"our stop's die event", []events.Action{events.ActionDie}, []events.Action{events.ActionDie}, true, false},
		{"an oom during our stop", []events.Action{events.ActionDie}, []events.Action{events.ActionOOM, events.ActionDie}, true, true},
		{"no event", []events.Action{events.ActionStart}, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o ownCalls
			c := o.begin("c1", tc.echoes...)
			o.covered("c1") // the call's refresh is asked: what comes now came after it
			for _, a := range tc.came {
				if !o.deferEvent("c1", ev(a)) {
					t.Fatalf("%s event not deferred during our call", a)
				}
			}
			if _, got := o.end(c, tc.succeeded); got != tc.again {
				t.Errorf("refresh again = %v, want %v", got, tc.again)
			}
			if o.deferEvent("c1", ev(events.ActionDie)) {
				t.Error("an event after our call ended was deferred")
			}
		})
	}
}

// Through the store, a pod's container lifecycle costs one inspect per call (its read-back),
// however Docker's events for those calls interleave with them, and the store still says what
// Docker says; an exit of its own right after our start is read.
func TestALifecycleCostsOneInspectPerCall(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	settle := func() { time.Sleep(150 * time.Millisecond) } // the events' way through the follower
	step := func(what string, want int, call func() error) {
		t.Helper()
		before := fake.Calls("InspectContainer")
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		settle()
		if n := fake.Calls("InspectContainer") - before; n != want {
			t.Errorf("%s: %d inspects, want %d", what, n, want)
		}
	}
	var id string
	step("create", 1, func() (err error) {
		id, err = s.CreateContainer(ctx, "k8s_app", &container.Config{Image: testImage, Labels: map[string]string{testLabel: "container"}}, &container.HostConfig{})
		return err
	})
	same(t, s, fake, id)
	step("start", 1, func() error { return s.StartContainer(ctx, id) })
	same(t, s, fake, id)
	step("stop", 1, func() error { return s.StopContainer(ctx, id, time.Second) })
	same(t, s, fake, id)
	step("start again", 1, func() error { return s.StartContainer(ctx, id) })
	if err := fake.ExitContainer(id, 3); err != nil { // its own exit: not our echo
		t.Fatal(err)
	}
	eventually(t, "the exit read", func() bool { return stateOf(t, s, id) == "exited" })
	same(t, s, fake, id)
	step("remove", 0, func() error { return s.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}) })
	if _, err := s.InspectContainer(ctx, id); !libdocker.IsNotFound(err) {
		t.Errorf("inspect after the removal: %v, want NotFound", err)
	}
}

// A create that fails on our side after Docker made the container (our context ended) leaves
// the store tracking it: the create event we held back for our create is read.
func TestACreateThatFailedLateIsStillRead(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	labels := map[string]string{testLabel: "container"}
	end := s.own.beginCreate("late")
	id, err := fake.CreateContainer(context.Background(), "late", &container.Config{Image: testImage, Labels: maps.Clone(labels)}, &container.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the create event held back", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return len(s.own.creating["late"]) == 1
	})
	s.mu.RLock()
	_, read := s.entries[id]
	s.mu.RUnlock()
	if read {
		t.Fatal("the held-back create was read by the follower")
	}
	// What Store.CreateContainer does when Docker's answer was an error.
	for _, made := range end() {
		s.refreshAfter(context.Background(), made)
	}
	same(t, s, fake, id)
}

// A call that succeeded without an echo (a stop of a stopped container: Docker sends no die)
// ends after echoWait, and the container's next events are read by the follower as before.
func TestACallWithoutAnEchoEnds(t *testing.T) {
	old := echoWait
	echoWait = 50 * time.Millisecond
	t.Cleanup(func() { echoWait = old })
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	id := create(t, s, "stopped", "container")
	if err := s.StopContainer(ctx, id, time.Second); err != nil { // never started: no die
		t.Fatal(err)
	}
	eventually(t, "the stop ended", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return len(s.own.running[id]) == 0
	})
	if err := fake.StartContainer(ctx, id); err != nil { // behind our back
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 7); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start and exit behind our back read", func() bool { return stateOf(t, s, id) == "exited" })
	same(t, s, fake, id)
}

// createEnded waits until the create of id has no call in flight: a create whose echo came after
// it returned waits for it (awaitEcho), and a call begun meanwhile would leave the events it
// notes to the create's end.
func createEnded(t *testing.T, s *Store, id string) {
	t.Helper()
	eventually(t, "the create's own call ended", func() bool {
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
		return len(s.own.running[id]) == 0
	})
}
