// Package store keeps in memory what Docker says of cri-dockerd's containers (sandboxes and
// their containers), so that the CRI's lists and status calls (the kubelet's relist every
// second) are answered without a Docker round trip. It is a libdocker.Client: Wrap puts it in
// front of the real client, and every call goes on to Docker except the reads it can answer.
//
// What it holds is exactly what Docker answered, never a state of its own making: each entry is
// the container's last inspect, taken again
//   - after each of our own calls that changes a container (create, start, stop, update, remove),
//     before that call returns, so that a caller reads its own writes;
//   - after each Docker event for it (a container exiting on its own, `docker rm -f`, an OOM kill),
//     within milliseconds of the event;
//   - for every container after the event stream broke (dockerd restarted), from a full relist;
//     until that relist is done, every read goes to Docker.
//
// Reads the store does not know how to answer go to Docker too: an inspect by name or by ID
// prefix, a container it does not track, a list with a filter other than label and id.
//
// The store is also the one follower of Docker's events for the rest of cri-dockerd: it tells
// its subscribers (Subscribe) each create, start, die and destroy of a tracked container, in
// Docker's order, and after each relist what changed while it did not follow (changes.go).
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/registry"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/dockerid"
	"github.com/cri-dockerd/cri-dockerd/internal/keyedmutex"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Store is a libdocker.Client whose container reads come from memory once it is synced.
type Store struct {
	libdocker.Client
	// label is the key every tracked container carries (io.kubernetes.docker.type).
	label string
	log   *logrus.Entry

	mu      sync.RWMutex
	entries map[string]*entry
	synced  bool

	// refreshing serialises the inspects of one container: the later of two inspects always
	// sees a later Docker state, so the entry never goes back in time.
	refreshing keyedmutex.Mutex
	images     imageCache
	// own are our calls in flight, per container, and the events that came meanwhile.
	own ownCalls

	// kick asks the follower to relist (a refresh after our own call failed, or Resync).
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool
	// Counters for tests and metrics.
	hits, misses atomic.Int64
	// listGen counts the changes of what ListContainers answers: an entry's list item, the set
	// of entries, synced. Changed under mu, after the change.
	listGen atomic.Uint64
	// conn counts the relists that synced the store, one per connection of the event stream
	// (under mu).
	conn    uint64
	version versionCache
	// eventsOnly: no reads from memory, no inspects (Options.EventsOnly).
	eventsOnly bool
	pub        publisher
}

// versionCache is Docker's version, asked once per connection of the event stream: it changes
// only when dockerd restarts, which ends the stream. Docker answers /version by running runc
// and docker-init for theirs: on a node starting 100 pods a call took 0.5 s on average
// (upstream cri-dockerd keeps the answer 60 s).
type versionCache struct {
	mu   sync.Mutex
	conn uint64
	ok   bool
	v    types.Version
}

// entry is one container as Docker last described it: the inspect (never changed: each reader
// gets a copy of its own, see copyInspect) and the list item made from it.
type entry struct {
	inspect *container.InspectResponse
	summary container.Summary
}

// Options configure a Store.
type Options struct {
	// Label is the key of the label that marks the containers to track.
	Label string
	// Logger receives the store's warnings; nil discards them.
	Logger *logrus.Entry
	// ResyncBackoff bounds the wait between two attempts to follow Docker's events again
	// (default 1 s); while dockerd is down, the store asks every 100 ms whether it is back.
	ResyncBackoff time.Duration
	// EventsOnly makes a store that only follows Docker's events for its subscribers: every
	// read goes to Docker, and it inspects nothing (its relists list only).
	EventsOnly bool
}

// Wrap returns a Store in front of docker. It answers from Docker alone until Start has synced it.
func Wrap(docker libdocker.Client, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(noWriter{})
		log = logrus.NewEntry(discard)
	}
	return &Store{
		Client: docker, label: opts.Label, log: log.WithField("component", "store"),
		entries: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		images:     imageCache{byRef: map[string]*image.InspectResponse{}},
		eventsOnly: opts.EventsOnly,
	}
}

type noWriter struct{}

func (noWriter) Write(p []byte) (int, error) { return len(p), nil }

// Docker is the client the store is in front of, for a caller that must not read memory.
func (s *Store) Docker() libdocker.Client { return s.Client }

// Synced reports whether reads are answered from memory.
func (s *Store) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fromMemory()
}

// fromMemory reports whether reads are answered from memory; s.mu held.
func (s *Store) fromMemory() bool { return s.synced && !s.eventsOnly }

// Len is the number of containers tracked.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries)
}

// Hits and Misses count the container reads answered from memory and from Docker.
func (s *Store) Hits() int64   { return s.hits.Load() }
func (s *Store) Misses() int64 { return s.misses.Load() }

// Start follows Docker's events and fills the store from a full list; it returns once the
// store is synced, or with the error of the first attempt (the store then keeps trying in the
// background, and reads go to Docker until it succeeds). Close stops it.
func (s *Store) Start(ctx context.Context, backoff time.Duration) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("store: started twice")
	}
	if backoff <= 0 {
		backoff = time.Second
	}
	first := make(chan error, 1)
	go s.run(backoff, first)
	select {
	case err := <-first:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops following Docker's events; reads go to Docker from then on.
func (s *Store) Close() {
	if !s.started.Load() {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// eventActions are the container events after which a container is inspected again: those
// that change what an inspect shows. exec_*, attach, resize, top and the like do not.
var eventActions = map[events.Action]bool{
	events.ActionCreate: true, events.ActionStart: true, events.ActionRestart: true,
	events.ActionDie: true, events.ActionOOM: true, events.ActionPause: true,
	events.ActionUnPause: true, events.ActionRename: true, events.ActionUpdate: true,
	events.ActionDestroy: true,
}

// run follows Docker's events for as long as the store lives: after each (re)connection it
// relists everything, and it marks the store unsynced whenever the stream breaks.
func (s *Store) run(backoff time.Duration, first chan<- error) {
	defer close(s.done)
	life, end := context.WithCancel(context.Background())
	defer end()
	go func() {
		select {
		case <-s.stop:
		case <-life.Done():
		}
		end()
	}()
	reported := false
	report := func(err error) {
		if !reported {
			reported = true
			first <- err
		}
	}
	for {
		ctx, cancel := context.WithCancel(life)
		// Subscribe first, then list: nothing falls between the two.
		msgs, errs := s.Client.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)), filters.Arg("label", s.label))})
		// Images apart: a label filter would drop their events.
		imgMsgs, imgErrs := s.Client.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
			filters.Arg("type", string(events.ImageEventType)))})
		err := s.resync(ctx)
		report(err)
		if err == nil {
			err = s.follow(ctx, msgs, errs, imgMsgs, imgErrs)
		}
		cancel()
		s.setSynced(false)
		select {
		case <-s.stop:
			return
		default:
		}
		s.log.Warnf("reads go to Docker until its events are followed again: %v", err)
		if libdocker.RetryWait(life, s.Client.Ping, 100*time.Millisecond, backoff) != nil {
			return
		}
	}
}

// follow refreshes the containers Docker's events name until the stream ends. Refreshes run
// side by side (at most eventWorkers): one container's are serialised by Refresh itself, so
// the last inspect of a container always sees its latest state; a burst of events (a node's
// pods starting) does not queue each behind the inspects of the others.
func (s *Store) follow(ctx context.Context, msgs <-chan events.Message, errs <-chan error, imgMsgs <-chan events.Message, imgErrs <-chan error) error {
	sem := make(chan struct{}, eventWorkers)
	failed := make(chan error, 1)
	// drain bounds the reading of the container stream after the image stream ended.
	var drain <-chan time.Time
	var imagesEnded error
	var wg sync.WaitGroup
	defer wg.Wait()
	// Reads go to Docker from the moment the stream breaks, not once the refreshes in flight
	// (which may wait on a dockerd going away) are done.
	defer s.setSynced(false)
	for {
		select {
		case <-imgMsgs:
			s.images.clear() // a pull, tag, untag, delete or load may change any image's digests
		case err, ok := <-imgErrs:
			if !ok || err == nil {
				err = errors.New("Docker's image event stream ended")
			}
			// dockerd going away ends both streams, in either order: the container events
			// the other still holds are read first, or subscribers would never be told of
			// them. Reads go to Docker from now on.
			s.setSynced(false)
			imgMsgs, imgErrs, imagesEnded = nil, nil, err
			drain = time.After(drainWait)
		case <-drain:
			return imagesEnded
		case <-s.kick:
			return errors.New("asked to relist (a refresh after our own call failed, or a subscriber asked)")
		case err := <-failed:
			return err
		case m := <-msgs:
			if !eventActions[m.Action] || m.Actor.ID == "" {
				continue
			}
			s.tellEvent(m)
			if s.eventsOnly {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			wg.Add(1)
			go func(m events.Message) {
				id, action := m.Actor.ID, m.Action
				defer func() { <-sem; wg.Done() }()
				if s.own.deferEvent(id, m) {
					return // our call on it reads the change
				}
				if err := s.refreshForEvent(ctx, id, action); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			}(m)
		case err, ok := <-errs:
			if !ok || err == nil {
				return errors.New("Docker's event stream ended")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// refreshTimeout bounds one inspect of a refresh, slowRefreshTimeout its retry after an event
// (variables for tests).
var refreshTimeout, slowRefreshTimeout = 10 * time.Second, 2 * time.Minute

// eventWorkers bounds the refreshes in flight after events.
const eventWorkers = 16

// drainWait bounds how long the container event stream is read after the image stream ended.
const drainWait = time.Second

// resync lists every tracked container and inspects each, then marks the store synced.
func (s *Store) resync(ctx context.Context) error {
	list, err := s.Client.ListContainers(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", s.label))})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	if s.eventsOnly {
		s.setSynced(true)
		s.tellRelist(list)
		return nil
	}
	present := make(map[string]bool, len(list))
	work := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range min(16, len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := s.Refresh(ctx, id); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for _, c := range list {
		present[c.ID] = true
		work <- c.ID
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	s.mu.Lock()
	for id := range s.entries {
		if !present[id] {
			// Gone while the stream was away (its refresh would find it gone too, unless it
			// was created since the list: then its create event refreshes it again).
			s.mu.Unlock()
			if err := s.Refresh(ctx, id); err != nil {
				return err
			}
			s.mu.Lock()
		}
	}
	s.synced = true
	s.conn++
	s.listGen.Add(1)
	s.mu.Unlock()
	s.images.clear()
	s.tellRelist(list)
	return nil
}

func (s *Store) setSynced(v bool) {
	s.mu.Lock()
	s.synced = v
	s.listGen.Add(1)
	s.mu.Unlock()
}

// ListGeneration is a number that changes whenever ListContainers could answer differently,
// and whether lists are answered from memory. What a caller builds from a list may be used
// again while the number stays the same; when lists are not from memory, never.
func (s *Store) ListGeneration() (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.listGen.Load(), s.fromMemory()
}

// Refresh inspects container id again and stores what Docker says: the new state, or its
// removal. It fails only when Docker could not be asked. An EventsOnly store has nothing to
// refresh.
func (s *Store) Refresh(ctx context.Context, id string) error {
	if s.eventsOnly {
		return nil
	}
	// Bounded: an inspect that hangs (a stuck runtime) must not hold the event follower.
	return s.refreshWithin(ctx, id, refreshTimeout)
}

// refreshForEvent refreshes id after an event of it (action). An inspect that times out while
// Docker answers others (a start or stop holds the container's lock: over 10 s on a node
// starting 100 pods at once) is asked again in the background with more patience, rather
// than relist everything. It fails when Docker could not be asked.
func (s *Store) refreshForEvent(ctx context.Context, id string, action events.Action) error {
	err := s.Refresh(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		go s.retryRefresh(ctx, id, action)
		return nil
	}
	if err != nil {
		return eventRefreshError(id, action, err)
	}
	return nil
}

// retryRefresh refreshes id after an event whose refresh timed out, outside the follower's
// workers and with slowRefreshTimeout; only if that fails too do reads go back to Docker.
func (s *Store) retryRefresh(ctx context.Context, id string, action events.Action) {
	if err := s.refreshWithin(ctx, id, slowRefreshTimeout); err != nil && ctx.Err() == nil {
		s.unsync(eventRefreshError(id, action, err))
	}
}

func eventRefreshError(id string, action events.Action, err error) error {
	return fmt.Errorf("refresh %.12s after its %s event: %w", id, action, err)
}

func (s *Store) refreshWithin(ctx context.Context, id string, timeout time.Duration) error {
	unlock := s.refreshing.Lock(id)
	defer unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := s.Client.InspectContainer(ctx, id)
	if libdocker.IsNotFound(err) {
		s.remove(id)
		return nil
	}
	if err != nil {
		return err
	}
	if c.Config == nil || c.Config.Labels[s.label] == "" {
		return nil // not one of ours
	}
	e := &entry{inspect: c, summary: summaryOf(c)}
	s.mu.Lock()
	if old, ok := s.entries[c.ID]; !ok || !sameSummary(old.summary, e.summary) {
		s.listGen.Add(1)
	}
	s.entries[c.ID] = e
	s.mu.Unlock()
	return nil
}

// remove drops the entry of id, if any.
func (s *Store) remove(id string) {
	s.mu.Lock()
	if _, ok := s.entries[id]; ok {
		delete(s.entries, id)
		s.listGen.Add(1)
	}
	s.mu.Unlock()
}

// sameSummary reports whether two list items of one container are equal (an inspect after an
// event that changed nothing a list shows leaves the list generation as it was).
func sameSummary(a, b container.Summary) bool {
	return a.ID == b.ID && a.Image == b.Image && a.ImageID == b.ImageID && a.Created == b.Created &&
		a.State == b.State && a.HostConfig.NetworkMode == b.HostConfig.NetworkMode &&
		slices.Equal(a.Names, b.Names) && maps.Equal(a.Labels, b.Labels)
}

// forget drops container id (removed by our own call).
func (s *Store) forget(id string) {
	unlock := s.refreshing.Lock(id)
	defer unlock()
	s.remove(id)
}

// copyInspect copies what a reader could change of an inspect: its top-level parts, their maps
// and slices (a JSON round trip of each, measured, was half of a status sweep's CPU).
func copyInspect(c *container.InspectResponse) *container.InspectResponse {
	out := *c
	if c.ContainerJSONBase != nil {
		base := *c.ContainerJSONBase
		out.ContainerJSONBase = &base
		if c.State != nil {
			st := *c.State
			base.State = &st
		}
		if c.HostConfig != nil {
			hc := *c.HostConfig
			hc.Binds = slices.Clone(hc.Binds)
			hc.Mounts = slices.Clone(hc.Mounts)
			hc.CapAdd = slices.Clone(hc.CapAdd)
			hc.CapDrop = slices.Clone(hc.CapDrop)
			hc.SecurityOpt = slices.Clone(hc.SecurityOpt)
			hc.Sysctls = maps.Clone(hc.Sysctls)
			hc.Annotations = maps.Clone(hc.Annotations)
			base.HostConfig = &hc
		}
	}
	if c.Config != nil {
		cfg := *c.Config
		cfg.Labels = maps.Clone(cfg.Labels)
		cfg.Env = slices.Clone(cfg.Env)
		cfg.Cmd = slices.Clone(cfg.Cmd)
		cfg.Entrypoint = slices.Clone(cfg.Entrypoint)
		out.Config = &cfg
	}
	out.Mounts = slices.Clone(c.Mounts)
	if c.NetworkSettings != nil {
		ns := *c.NetworkSettings
		if c.NetworkSettings.Networks != nil {
			ns.Networks = make(map[string]*network.EndpointSettings, len(c.NetworkSettings.Networks))
			for k, v := range c.NetworkSettings.Networks {
				if v != nil {
					ep := *v
					v = &ep
				}
				ns.Networks[k] = v
			}
		}
		out.NetworkSettings = &ns
	}
	return &out
}

// summaryOf is the list item Docker's list would give for an inspected container.
func summaryOf(c *container.InspectResponse) container.Summary {
	sum := container.Summary{ID: c.ID, Names: []string{c.Name}, ImageID: c.Image}
	if c.Config != nil {
		sum.Image = c.Config.Image
		sum.Labels = c.Config.Labels
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		sum.Created = t.Unix()
	}
	if c.State != nil {
		sum.State = c.State.Status
	}
	if c.HostConfig != nil {
		sum.HostConfig.NetworkMode = string(c.HostConfig.NetworkMode)
	}
	if !strings.HasPrefix(c.Name, "/") {
		sum.Names = []string{"/" + c.Name}
	}
	return sum
}

// InspectContainer answers from memory for a tracked container named by its full ID.
func (s *Store) InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	if dockerid.IsFull(id) {
		s.mu.RLock()
		e, ok := s.entries[id]
		synced := s.fromMemory()
		s.mu.RUnlock()
		if synced {
			if !ok {
				// Not ours, or gone: Docker says which (a docker run container is not tracked).
				s.misses.Add(1)
				return s.Client.InspectContainer(ctx, id)
			}
			s.hits.Add(1)
			return copyInspect(e.inspect), nil
		}
	}
	s.misses.Add(1)
	return s.Client.InspectContainer(ctx, id)
}

// ListContainers answers from memory a list of all containers (All) filtered by labels of
// ours and IDs, once synced; anything else goes to Docker.
func (s *Store) ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	match, ok := s.matcher(opts)
	if !ok {
		s.misses.Add(1)
		return s.Client.ListContainers(ctx, opts)
	}
	s.mu.RLock()
	if !s.fromMemory() {
		s.mu.RUnlock()
		s.misses.Add(1)
		return s.Client.ListContainers(ctx, opts)
	}
	out := make([]container.Summary, 0, len(s.entries))
	for _, e := range s.entries {
		if match(e.summary) {
			c := e.summary
			c.Labels, c.Names = maps.Clone(c.Labels), slices.Clone(c.Names) // the reader's own
			out = append(out, c)
		}
	}
	s.mu.RUnlock()
	s.hits.Add(1)
	return out, nil
}

// matcher is the filter of opts as a function, when the store can answer it: all containers,
// label filters that select only containers of ours, id filters (which Docker matches
// anywhere in the ID).
func (s *Store) matcher(opts container.ListOptions) (func(container.Summary) bool, bool) {
	if !opts.All || opts.Size || opts.Latest || opts.Since != "" || opts.Before != "" || opts.Limit > 0 {
		return nil, false
	}
	for _, key := range opts.Filters.Keys() {
		if key != "label" && key != "id" {
			return nil, false
		}
	}
	labels := opts.Filters.Get("label")
	ours := false
	for _, l := range labels {
		if k, _, _ := strings.Cut(l, "="); k == s.label {
			ours = true
		}
	}
	if !ours {
		return nil, false // it may select containers we do not track
	}
	ids := opts.Filters.Get("id")
	return func(c container.Summary) bool {
		for _, l := range labels {
			k, v, hasValue := strings.Cut(l, "=")
			got, ok := c.Labels[k]
			if !ok || (hasValue && got != v) {
				return false
			}
		}
		if len(ids) > 0 {
			found := false
			for _, id := range ids {
				if strings.Contains(c.ID, id) {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}, true
}

// The calls that change a container refresh it before they return.

func (s *Store) CreateContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	endCreate := s.own.beginCreate(name)
	id, err := s.Client.CreateContainer(ctx, name, cfg, hc)
	if err != nil {
		// Docker may have made it all the same (our context ended first): what its create
		// event named is read now, as the follower would have.
		for _, made := range endCreate() {
			s.refreshAfter(ctx, made)
		}
		return id, err
	}
	call := s.own.begin(id, events.ActionCreate)
	if slices.Contains(endCreate(), id) {
		s.own.echoed(call) // its create event came before Docker's answer
	}
	s.refreshAfter(ctx, id)
	s.endOwnCall(ctx, call, true)
	return id, nil
}

func (s *Store) StartContainer(ctx context.Context, id string) error {
	call := s.own.begin(id, events.ActionStart)
	err := s.Client.StartContainer(ctx, id)
	s.refreshAfter(ctx, id) // a failed start changes the state too (its error)
	s.endOwnCall(ctx, call, err == nil)
	return err
}

// StopContainer's echo is the die event: Docker answers a stop once the container's state is
// stopped, and sends the event after it set that state.
func (s *Store) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	call := s.own.begin(id, events.ActionDie)
	err := s.Client.StopContainer(ctx, id, timeout)
	s.refreshAfter(ctx, id)
	s.endOwnCall(ctx, call, err == nil)
	return err
}

func (s *Store) RemoveContainer(ctx context.Context, id string, opts container.RemoveOptions) error {
	full := id
	if !dockerid.IsFull(id) {
		// A prefix or a name: which container it is must be known before it is gone.
		if c, err := s.Client.InspectContainer(ctx, id); err == nil {
			full = c.ID
		}
	}
	call := s.own.begin(full)
	err := s.Client.RemoveContainer(ctx, id, opts)
	if err == nil && dockerid.IsFull(full) {
		// Gone for good (an ID is never used again): the events of its end need no reading.
		s.own.gone(full)
		s.forget(full)
		s.own.end(call, true)
		return nil
	}
	s.refreshAfter(ctx, full)
	s.endOwnCall(ctx, call, false)
	return err
}

func (s *Store) UpdateContainer(ctx context.Context, id string, update container.UpdateConfig) ([]string, error) {
	call := s.own.begin(id, events.ActionUpdate)
	warnings, err := s.Client.UpdateContainer(ctx, id, update)
	if err == nil {
		s.refreshAfter(ctx, id)
	}
	s.endOwnCall(ctx, call, err == nil)
	return warnings, err
}

// endOwnCall ends our call, refreshing its container again when an event for it came meanwhile
// that the refresh after the call may have read Docker before. A call that succeeded ends
// when its echo came, after it returned.
func (s *Store) endOwnCall(ctx context.Context, call *ownCall, succeeded bool) {
	if !succeeded || s.own.settled(call) {
		if _, again := s.own.end(call, succeeded); again {
			s.refreshAfter(ctx, call.id)
		}
		return
	}
	go func() {
		if !s.own.awaitEcho(call, s.stop) {
			return
		}
		// After the call returned: the event's refresh, as the follower makes it.
		if action, again := s.own.end(call, succeeded); again {
			if err := s.refreshForEvent(context.WithoutCancel(ctx), call.id, action); err != nil {
				s.unsync(err)
			}
		}
	}()
}

// refreshAfter refreshes a container after our own call; should Docker not answer, the store
// cannot vouch for it any more and goes back to Docker until a relist.
func (s *Store) refreshAfter(ctx context.Context, id string) {
	if !dockerid.IsFull(id) {
		// A prefix or a name: resolve it as Docker does, once.
		c, err := s.Client.InspectContainer(context.WithoutCancel(ctx), id)
		if err != nil {
			if !libdocker.IsNotFound(err) {
				s.unsync(err)
			}
			return
		}
		id = c.ID
	}
	// The events noted so far for id came before this inspect is asked: it reads their changes.
	s.own.covered(id)
	if err := s.Refresh(context.WithoutCancel(ctx), id); err != nil {
		s.unsync(err)
	}
}

// errAskedToResync is why a store relists at a subscriber's request (Resync).
var errAskedToResync = errors.New("a subscriber asked for a relist")

// unsync sends reads to Docker until the next relist; the event follower is restarted by
// breaking its stream.
func (s *Store) unsync(err error) {
	s.mu.Lock()
	was := s.synced
	s.synced = false
	s.listGen.Add(1)
	s.mu.Unlock()
	if was {
		s.log.Warnf("reads go to Docker until the next relist: %v", err)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// InspectImage answers an inspect by image ID or by name from memory, once Docker answered it:
// what a name or an ID resolves to changes only with a pull, tag, untag, delete, load or
// import, whose image events clear the cache, and our own pulls and removals clear it before
// they return. The kubelet asks the status of a pod's image by name for every container it
// starts, and we inspect the pause image for every sandbox: 300 image inspects for 100 pods.
func (s *Store) InspectImage(ctx context.Context, ref string) (*image.InspectResponse, error) {
	if !s.Synced() {
		return s.Client.InspectImage(ctx, ref)
	}
	if img, ok := s.images.get(ref); ok {
		return img, nil
	}
	gen := s.images.generation()
	img, err := s.Client.InspectImage(ctx, ref)
	if err == nil {
		s.images.put(ref, img, gen)
	}
	return img, err
}

// Version answers Docker's version from memory while the store follows the same dockerd's
// events.
func (s *Store) Version(ctx context.Context) (types.Version, error) {
	connection := func() (uint64, bool) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.conn, s.fromMemory()
	}
	conn, synced := connection()
	if !synced {
		return s.Client.Version(ctx)
	}
	c := &s.version
	c.mu.Lock()
	if c.ok && c.conn == conn {
		v := c.v
		v.Components = slices.Clone(v.Components)
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := s.Client.Version(ctx)
	if err != nil {
		return v, err
	}
	if now, synced := connection(); synced && now == conn {
		c.mu.Lock()
		c.conn, c.ok, c.v = conn, true, v
		c.v.Components = slices.Clone(v.Components)
		c.mu.Unlock()
	}
	return v, nil
}

// PullImage and RemoveImage change what names resolve to: the cache is cleared before they
// return, not only when their events come.
func (s *Store) PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error {
	defer s.images.clear()
	return s.Client.PullImage(ctx, ref, auth, progressDeadline)
}

func (s *Store) RemoveImage(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	defer s.images.clear()
	return s.Client.RemoveImage(ctx, ref, opts)
}
