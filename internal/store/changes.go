package store

import (
	"slices"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
)

// Change is one change of a tracked container that the store learned.
type Change struct {
	ID string
	// Action is what happened: create, start, die, oom or destroy for an event the store followed;
	// for a relist's change create (new), destroy (gone) or "" (its state changed).
	Action events.Action
	// State is the container's Docker state as of this change ("created", "running",
	// "exited", ...): the one its event leads to, or the one the relist found; "" once gone.
	State string
	// Labels are the container's labels (for a followed event, Docker's attributes of it:
	// its labels, name and image). Shared by every subscriber: read only.
	Labels map[string]string
	// Attributes are the attributes of the Docker event followed; nil for a relist's change.
	// Read only too.
	Attributes map[string]string
	// Time is when Docker says it happened, or when the relist found it.
	Time time.Time
}

// Event is what a subscriber gets: one Docker event followed (Relist false, one change), or a
// relist (Relist true): every change since what the subscriber was last told, from the full list
// the store made after (re)connecting to Docker's event stream; maybe none. A subscriber's
// first relist tells it what exists, as changes from nothing.
//
// A followed event is told as soon as the store reads it, before the store's own inspect of
// the container: Refresh brings the store up to it.
type Event struct {
	Relist  bool
	Changes []Change
}

// Subscription is a subscriber's queue of events, in order. The store never waits on a
// subscriber: what it has not taken yet waits in memory.
type Subscription struct {
	out   chan Event
	stop  chan struct{}
	mu    sync.Mutex
	queue []Event
	wake  chan struct{}
	owner *Store
}

// Events are the events, in the order the store learned them; closed by Close.
func (sub *Subscription) Events() <-chan Event { return sub.out }

// Close ends the subscription.
func (sub *Subscription) Close() {
	s := sub.owner
	s.pub.Lock()
	if _, ok := s.pub.subs[sub]; ok {
		delete(s.pub.subs, sub)
		close(sub.stop)
	}
	s.pub.Unlock()
}

func (sub *Subscription) push(ev Event) {
	sub.mu.Lock()
	sub.queue = append(sub.queue, ev)
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *Subscription) pump() {
	defer close(sub.out)
	for {
		sub.mu.Lock()
		queue := sub.queue
		sub.queue = nil
		sub.mu.Unlock()
		for _, ev := range queue {
			select {
			case sub.out <- ev:
			case <-sub.stop:
				return
			}
		}
		select {
		case <-sub.wake:
		case <-sub.stop:
			return
		}
	}
}

// publisher is what subscribers were told of each container (told), and the subscribers. A
// relist tells the difference between told and the list, so every change reaches subscribers
// once, whether an event or a relist told it.
type publisher struct {
	sync.Mutex
	subs     map[*Subscription]struct{}
	told     map[string]Change
	relisted bool
}

// Subscribe tells the subscriber, from now on, every change the store learns: first what it
// knows (a relist event), if it has relisted yet; else its first relist tells it.
func (s *Store) Subscribe() *Subscription {
	sub := &Subscription{out: make(chan Event), stop: make(chan struct{}), wake: make(chan struct{}, 1), owner: s}
	s.pub.Lock()
	if s.pub.subs == nil {
		s.pub.subs = map[*Subscription]struct{}{}
	}
	s.pub.subs[sub] = struct{}{}
	if s.pub.relisted {
		now := time.Now()
		changes := make([]Change, 0, len(s.pub.told))
		for _, c := range s.pub.told {
			c.Action, c.Attributes, c.Time = events.ActionCreate, nil, now
			changes = append(changes, c)
		}
		sub.push(Event{Relist: true, Changes: changes})
	}
	s.pub.Unlock()
	go sub.pump()
	return sub
}

// publishedActions are the events the store tells subscribers of, and the states they lead to.
var publishedActions = map[events.Action]string{
	events.ActionCreate: "created", events.ActionStart: "running", events.ActionDie: "exited", events.ActionDestroy: "",
}

// tellEvent tells subscribers of a Docker event of a tracked container. An oom event is told
// as it comes and changes nothing subscribers know of the container: Docker 20.10 records
// State.OOMKilled only when containerd's TaskOOM comes before the task's exit, while the event
// always comes, after the die when Docker lost that race.
func (s *Store) tellEvent(m events.Message) {
	at := time.Unix(0, m.TimeNano)
	if m.TimeNano == 0 {
		at = time.Unix(m.Time, 0)
	}
	if m.Action == events.ActionOOM && m.Actor.ID != "" {
		s.pub.Lock()
		defer s.pub.Unlock()
		c := Change{ID: m.Actor.ID, Action: m.Action, Labels: m.Actor.Attributes, Attributes: m.Actor.Attributes, Time: at}
		if old, ok := s.pub.told[c.ID]; ok {
			c.State = old.State
		}
		for sub := range s.pub.subs {
			sub.push(Event{Changes: []Change{c}})
		}
		return
	}
	state, ok := publishedActions[m.Action]
	if !ok || m.Actor.ID == "" {
		return
	}
	c := Change{ID: m.Actor.ID, Action: m.Action, State: state, Labels: m.Actor.Attributes, Attributes: m.Actor.Attributes, Time: at}
	s.pub.Lock()
	defer s.pub.Unlock()
	if s.pub.told == nil {
		s.pub.told = map[string]Change{}
	}
	if m.Action == events.ActionDestroy {
		delete(s.pub.told, c.ID)
	} else {
		s.pub.told[c.ID] = c
	}
	for sub := range s.pub.subs {
		sub.push(Event{Changes: []Change{c}})
	}
}

// tellRelist tells subscribers what changed between what they were told and list, a full
// list of the tracked containers.
func (s *Store) tellRelist(list []container.Summary) {
	now := time.Now()
	s.pub.Lock()
	defer s.pub.Unlock()
	before := s.pub.told
	s.pub.told = make(map[string]Change, len(list))
	var changes []Change
	for _, c := range list {
		ch := Change{ID: c.ID, State: c.State, Labels: c.Labels, Time: now}
		s.pub.told[c.ID] = ch
		old, ok := before[c.ID]
		switch {
		case !ok:
			ch.Action = events.ActionCreate
		case old.State == c.State:
			continue
		}
		changes = append(changes, ch)
	}
	for id, old := range before {
		if _, ok := s.pub.told[id]; !ok {
			changes = append(changes, Change{ID: id, Action: events.ActionDestroy, Labels: old.Labels, Time: now})
		}
	}
	// The same order for every subscriber; which order suits it is the subscriber's to choose.
	slices.SortFunc(changes, func(a, b Change) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	s.pub.relisted = true
	for sub := range s.pub.subs {
		sub.push(Event{Relist: true, Changes: changes})
	}
}

// Resync makes the store follow Docker's events again and relist: subscribers are told what
// changed, and a subscriber that could not act on a change gets another chance. Reads go to
// Docker until the relist is done.
func (s *Store) Resync() {
	s.unsync(errAskedToResync)
}
