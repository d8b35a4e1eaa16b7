package store

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
)

// ownCalls counts our own calls in flight per container. An event for a container with a call
// in flight is not refreshed by the follower but noted, and the call refreshes the container
// again when it ends, if the event came after the call's own refresh was asked (one that came
// before is read by that refresh). Docker holds a container's lock for the whole of a start or
// stop, so an inspect made then waits for it: on a node starting 100 pods at once a start took
// over 10 s, the follower's inspect after the create event timed out, and every read went to
// Docker until a full relist.
//
// A call's echoes are the events Docker sends for the call itself (the start event of our
// start): Docker makes their change before it answers the call, so the refresh after the call
// reads it, although the event itself comes later, usually after the refresh. A call that
// succeeded stays in flight until its echo came (at most echoWait), and its echoes cost no
// second inspect; any other event does (a container that exits as it starts). Docker's events
// come in order, so an event after the echo is one the follower reads.
type ownCalls struct {
	mu      sync.Mutex
	running map[string][]*ownCall
	// came is the actions of the events noted for a container since its refresh was last asked.
	came map[string][]events.Action
	// creating is our creates in flight by container name, with the IDs of the create events
	// that came for that name meanwhile (the ID is not known before Docker answers).
	creating map[string][]string
	// removed is the containers we removed whose destroy event has not come yet (the last
	// removedKept of them): an event for one has nothing left to read.
	removed      map[string]bool
	removedOrder []string
}

// ownCall is one call of ours on a container.
type ownCall struct {
	id     string
	echoes []events.Action
	// echoed says an echo came since the call began; event is signalled at every event noted.
	echoed bool
	event  chan struct{}
}

// removedKept bounds ownCalls.removed, for destroy events that never come (a broken stream).
const removedKept = 256

// echoWait bounds how long a call that succeeded waits for its echo (Docker sends none for a
// start of a running container or a stop of a stopped one).
var echoWait = 2 * time.Second

func (o *ownCalls) init() {
	if o.running == nil {
		o.running, o.came, o.creating = map[string][]*ownCall{}, map[string][]events.Action{}, map[string][]string{}
		o.removed = map[string]bool{}
	}
}

// begin marks a call on id in flight, whose own events are echoes.
func (o *ownCalls) begin(id string, echoes ...events.Action) *ownCall {
	c := &ownCall{id: id, echoes: echoes, event: make(chan struct{}, 1)}
	o.mu.Lock()
	o.init()
	o.running[id] = append(o.running[id], c)
	o.mu.Unlock()
	return c
}

// settled reports whether the call has nothing more to wait for: an echo came, or an event
// that is not one (which is read at the call's end, and after which no echo can come).
func (o *ownCalls) settled(c *ownCall) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return c.echoed || len(c.echoes) == 0 || slices.ContainsFunc(o.came[c.id], func(a events.Action) bool { return !slices.Contains(c.echoes, a) })
}

// echoed notes that the call's echo came.
func (o *ownCalls) echoed(c *ownCall) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c.echoed = true
}

// awaitEcho waits, at most echoWait, until the call has nothing more to wait for; false if
// the store closed meanwhile.
func (o *ownCalls) awaitEcho(c *ownCall, stop <-chan struct{}) bool {
	timeout := time.NewTimer(echoWait)
	defer timeout.Stop()
	for !o.settled(c) {
		select {
		case <-c.event:
		case <-timeout.C:
			return true
		case <-stop:
			return false
		}
	}
	return true
}

// end ends the call (succeeded: whether Docker did what was asked) and reports whether an
// event for its container came meanwhile that the call's refresh may have read Docker before,
// and that event's action.
func (o *ownCalls) end(c *ownCall, succeeded bool) (events.Action, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	calls := slices.DeleteFunc(o.running[c.id], func(r *ownCall) bool { return r == c })
	if len(calls) > 0 {
		o.running[c.id] = calls
		return "", false // another call on it is still running: it reads these events too
	}
	came := o.came[c.id]
	delete(o.running, c.id)
	delete(o.came, c.id)
	for _, a := range came {
		if !succeeded || !slices.Contains(c.echoes, a) {
			return a, true
		}
	}
	return "", false
}

// beginCreate marks our create of a container named name in flight: its create event is the
// create's to read. The function it returns ends it and gives the IDs of the create events
// that came for the name meanwhile (for a create that failed after all: Docker may have made
// the container).
func (o *ownCalls) beginCreate(name string) (end func() []string) {
	name = strings.TrimPrefix(name, "/")
	o.mu.Lock()
	o.init()
	_, dup := o.creating[name]
	if !dup {
		o.creating[name] = []string{}
	}
	o.mu.Unlock()
	return func() []string {
		if dup {
			return nil // Docker refuses one of two creates of one name; the other's is kept
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		ids := o.creating[name]
		delete(o.creating, name)
		return ids
	}
}

// gone notes that our removal of id succeeded.
func (o *ownCalls) gone(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if len(o.removedOrder) == removedKept {
		delete(o.removed, o.removedOrder[0])
		o.removedOrder = o.removedOrder[1:]
	}
	o.removed[id] = true
	o.removedOrder = append(o.removedOrder, id)
}

// covered forgets the events noted for id: a refresh of id is about to be asked, which reads
// whatever they announced.
func (o *ownCalls) covered(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.running[id]) > 0 {
		o.came[id] = o.came[id][:0]
	}
}

// deferEvent reports whether a call of ours will read the change of event m on container id:
// a call on id is in flight (the event is noted for its end), or m is the create event of our
// create in flight of that name; or there is nothing to read: we removed id.
func (o *ownCalls) deferEvent(id string, m events.Message) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.removed[id] {
		if m.Action == events.ActionDestroy {
			delete(o.removed, id) // its last event; the order list keeps it until it is cut
		}
		return true
	}
	if calls := o.running[id]; len(calls) > 0 {
		if !slices.Contains(o.came[id], m.Action) {
			o.came[id] = append(o.came[id], m.Action)
		}
		for _, c := range calls {
			c.echoed = c.echoed || slices.Contains(c.echoes, m.Action)
			select {
			case c.event <- struct{}{}:
			default:
			}
		}
		return true
	}
	if ids, ok := o.creating[m.Actor.Attributes["name"]]; ok && m.Action == events.ActionCreate {
		o.creating[m.Actor.Attributes["name"]] = append(ids, id)
		return true
	}
	return false
}
