package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// next is the subscription's next event, as "relist" or "event" and its changes (action, ID,
// state), sorted for a relist.
func next(t *testing.T, sub *Subscription) string {
	t.Helper()
	select {
	case ev := <-sub.Events():
		var out []string
		for _, c := range ev.Changes {
			if c.Time.IsZero() || c.Labels[testLabel] == "" {
				t.Errorf("change %+v without its time or labels", c)
			}
			out = append(out, fmt.Sprintf("%s %.6s %s", c.Action, c.ID, c.State))
		}
		kind := "event"
		if ev.Relist {
			kind = "relist"
			sort.Strings(out)
		}
		return fmt.Sprint(kind, out)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return ""
}

func noMore(t *testing.T, sub *Subscription) {
	t.Helper()
	select {
	case ev := <-sub.Events():
		t.Errorf("unexpected event %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// A subscriber learns what the store knows (a relist), each followed event in order, and after
// Docker's stream came back, what changed while it was away (another relist).
func testSubscribers(t *testing.T, eventsOnly bool) *libdocker.Fake {
	fake := newFake()
	ctx := context.Background()
	before := create(t, fake, "before", "container")
	s := Wrap(fake, Options{Label: testLabel, EventsOnly: eventsOnly})
	if err := s.Start(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sub := s.Subscribe()
	t.Cleanup(sub.Close)
	if got, want := next(t, sub), fmt.Sprintf("relist[create %.6s created]", before); got != want {
		t.Errorf("first event %s, want %s", got, want)
	}

	id := create(t, s, "c", "container")
	create(t, s, "untracked", "")
	if err := s.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 1); err != nil { // behind our back
		t.Fatal(err)
	}
	for _, want := range []string{"create %.6s created", "start %.6s running", "die %.6s exited"} {
		if got, want := next(t, sub), fmt.Sprintf("event["+want+"]", id); got != want {
			t.Errorf("event %s, want %s", got, want)
		}
	}

	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	fake.InjectPersistentError("Events", away)
	fake.InjectPersistentError("Ping", away)
	fake.BreakEvents(errors.New("unexpected EOF"))
	eventually(t, "not following", func() bool { return fake.EventSubscribers() == 0 })
	if err := fake.StartContainer(ctx, before); err != nil {
		t.Fatal(err)
	}
	if err := fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	born := create(t, fake, "born", "container")
	noMore(t, sub)
	fake.InjectPersistentError("Events", nil)
	fake.InjectPersistentError("Ping", nil)
	want := []string{fmt.Sprintf(" %.6s running", before), fmt.Sprintf("create %.6s created", born), fmt.Sprintf("destroy %.6s ", id)}
	sort.Strings(want)
	if got := next(t, sub); got != fmt.Sprint("relist", want) {
		t.Errorf("after the outage %s, want relist%v", got, want)
	}
	noMore(t, sub)

	// A subscriber asks for a relist: nothing changed, it is told so.
	s.Resync()
	if got := next(t, sub); got != "relist[]" {
		t.Errorf("after Resync %s, want an empty relist", got)
	}
	// A late subscriber starts from what the others were told.
	late := s.Subscribe()
	t.Cleanup(late.Close)
	want = []string{fmt.Sprintf("create %.6s running", before), fmt.Sprintf("create %.6s created", born)}
	sort.Strings(want)
	if got := next(t, late); got != fmt.Sprint("relist", want) {
		t.Errorf("late subscriber's first event %s, want relist%v", got, want)
	}
	return fake
}

func TestSubscribersAreToldEventsAndRelists(t *testing.T) {
	testSubscribers(t, false)
}

// An events-only store tells its subscribers the same, without a single inspect.
func TestAnEventsOnlyStoreTellsTheSameAndInspectsNothing(t *testing.T) {
	fake := testSubscribers(t, true)
	if n := fake.Calls("InspectContainer"); n != 0 {
		t.Errorf("%d inspects, want none", n)
	}
}

// An events-only store answers every read from Docker.
func TestAnEventsOnlyStoreReadsFromDocker(t *testing.T) {
	fake := newFake()
	s := Wrap(fake, Options{Label: testLabel, EventsOnly: true})
	if err := s.Start(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id := create(t, s, "c", "container")
	if _, fromMemory := s.ListGeneration(); fromMemory || s.Synced() {
		t.Error("an events-only store says it answers from memory")
	}
	lists := fake.Calls("ListContainers")
	if _, err := s.ListContainers(context.Background(), container.ListOptions{All: true, Filters: libdocker.LabelFilter(testLabel)}); err != nil {
		t.Fatal(err)
	}
	if stateOf(t, s, id) != "created" || fake.Calls("ListContainers") != lists+1 || s.Hits() != 0 {
		t.Errorf("reads from memory: %d hits", s.Hits())
	}
}

// heldEvents is a Docker whose image event stream the test ends, and whose container events
// wait while held (still in the stream when the image stream ends).
type heldEvents struct {
	*libdocker.Fake
	mu      sync.Mutex
	imgErrs chan error
	gate    chan struct{} // closed: container events flow
}

func (d *heldEvents) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs, errs := d.Fake.Events(ctx, opts)
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Contains(opts.Filters.Get("type"), string(events.ImageEventType)) {
		d.imgErrs = make(chan error, 1)
		return nil, d.imgErrs
	}
	out := make(chan events.Message)
	go func() {
		for {
			select {
			case m := <-msgs:
				d.mu.Lock()
				gate := d.gate
				d.mu.Unlock()
				select {
				case <-gate:
				case <-ctx.Done():
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errs
}

func (d *heldEvents) hold(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if on {
		d.gate = make(chan struct{})
	} else {
		close(d.gate)
	}
}

// dockerd going away ends the image stream and the container stream in either order: the
// container events still in their stream when the image stream ended are told, not lost (a
// relist would not see a container that died and started again meanwhile).
func TestContainerEventsAfterTheImageStreamEndedAreTold(t *testing.T) {
	fake := newFake()
	d := &heldEvents{Fake: fake, gate: make(chan struct{})}
	close(d.gate)
	s := Wrap(d, Options{Label: testLabel})
	ctx := context.Background()
	if err := s.Start(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sub := s.Subscribe()
	t.Cleanup(sub.Close)
	if got := next(t, sub); got != "relist[]" {
		t.Fatalf("first event %s", got)
	}
	id := create(t, s, "c", "container")
	if err := s.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	next(t, sub)
	next(t, sub)
	d.hold(true)
	if err := fake.ExitContainer(id, 1); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.imgErrs <- errors.New("unexpected EOF")
	d.mu.Unlock()
	eventually(t, "unsynced", func() bool { return !s.Synced() })
	d.hold(false)
	if got, want := next(t, sub), fmt.Sprintf("event[die %.6s exited]", id); got != want {
		t.Errorf("after the image stream ended: %s, want %s", got, want)
	}
	if got := next(t, sub); got != "relist[]" {
		t.Errorf("then %s, want a relist with nothing new", got)
	}
}

// An oom event is told with the state subscribers last had, and changes nothing a late
// subscriber or the next relist starts from: Docker sends it after the die when it lost its
// OOMKilled race.
func TestOOMEventsAreToldAndChangeNothing(t *testing.T) {
	fake := newFake()
	ctx := context.Background()
	s := Wrap(fake, Options{Label: testLabel})
	if err := s.Start(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sub := s.Subscribe()
	t.Cleanup(sub.Close)
	if got := next(t, sub); got != "relist[]" {
		t.Fatalf("first event %s", got)
	}
	id := create(t, s, "c", "container")
	if err := s.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := fake.OOMKillContainer(id, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"create %.6s created", "start %.6s running", "die %.6s exited", "oom %.6s exited"} {
		if got, want := next(t, sub), fmt.Sprintf("event["+want+"]", id); got != want {
			t.Errorf("event %s, want %s", got, want)
		}
	}
	late := s.Subscribe()
	t.Cleanup(late.Close)
	if got, want := next(t, late), fmt.Sprintf("relist[create %.6s exited]", id); got != want {
		t.Errorf("late subscriber's first event %s, want %s", got, want)
	}
	s.Resync()
	if got := next(t, sub); got != "relist[]" {
		t.Errorf("after Resync %s, want an empty relist: the oom changed nothing", got)
	}
}
