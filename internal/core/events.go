package core

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/store"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
)

// Container events for the kubelet's Evented PLEG. One watcher follows the container store's
// events (the store is the one follower of Docker's: container create, start, die, destroy of
// our containers and sandboxes) and fans each event out, with the pod's sandbox status and
// container statuses, to every GetContainerEvents stream. When Docker's stream breaks (dockerd
// restarted) the store reconnects and relists, and tells what changed meanwhile: every change
// the watcher missed becomes an event, so no state is lost. An event whose statuses cannot be
// gathered (Docker went away between its event and our inspect, e.g. the die events dockerd
// sends while it shuts down) is not sent half empty: it is kept as unsent, the watcher asks the
// store to relist, and sends it after the relist with the statuses of then.
const (
	// eventBuffer is how many events a slow GetContainerEvents stream may fall behind before
	// it is ended (the kubelet reconnects and relists).
	eventBuffer = 1024
	// eventBuildTimeout bounds gathering the statuses of one event.
	eventBuildTimeout = 30 * time.Second
)

// knownContainer is the last state the watcher saw of one of our containers or sandboxes.
type knownContainer struct {
	state     runtimeapi.ContainerState
	sandbox   bool
	sandboxID string // the pod's sandbox (the container itself for a sandbox)
}

type unsentEvent struct {
	typ runtimeapi.ContainerEventType
	k   knownContainer
}

type eventSub struct {
	ch       chan *runtimeapi.ContainerEventResponse
	overflow bool
	// since is when the stream opened: what happened before is the state the client lists,
	// not events (the watcher may handle an older event after the stream opened).
	since int64
}

type eventBroker struct {
	s      *Service
	buffer int

	mu    sync.Mutex
	subs  map[*eventSub]struct{}
	known map[string]knownContainer
	// sandboxStatus is the last status sent for each sandbox: the kubelet needs it in the
	// sandbox's deletion event, when Docker can no longer tell.
	sandboxStatus map[string]*runtimeapi.PodSandboxStatus
	// unsent is the last event of each container or sandbox that could not be built (or is
	// being built); the next relist sends it unless the changes it tells report it anyway.
	unsent  map[string]unsentEvent
	started bool
	closed  bool
	// ready is closed once the watcher follows the store's events and knows the current state.
	ready chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newEventBroker(s *Service) *eventBroker {
	return &eventBroker{
		s: s, buffer: eventBuffer,
		subs: map[*eventSub]struct{}{}, known: map[string]knownContainer{}, sandboxStatus: map[string]*runtimeapi.PodSandboxStatus{},
		unsent: map[string]unsentEvent{},
		ready:  make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// GetContainerEvents streams container events until the client goes away. Once the server has
// sent the stream's headers, every later change of a container or sandbox is reported.
func (s *Service) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	ctx := stream.Context()
	sub, err := s.events.subscribe()
	if err != nil {
		return err
	}
	defer s.events.unsubscribe(sub)
	select {
	case <-s.events.ready:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case ev, ok := <-sub.ch:
			if !ok {
				if sub.overflow {
					return status.Errorf(codes.ResourceExhausted, "container event stream fell %d events behind and was ended; reconnect", cap(sub.ch))
				}
				return status.Error(codes.Unavailable, "cri-dockerd is shutting down")
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

func (b *eventBroker) subscribe() (*eventSub, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, status.Error(codes.Unavailable, "cri-dockerd is shutting down")
	}
	sub := &eventSub{ch: make(chan *runtimeapi.ContainerEventResponse, b.buffer), since: time.Now().UnixNano()}
	b.subs[sub] = struct{}{}
	b.startLocked()
	return sub, nil
}

// start follows the store's events from now on, with or without subscribers: the sandbox index
// learns from them which sandboxes stopped or went away behind our back. Without subscribers an
// event costs no Docker call.
func (b *eventBroker) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startLocked()
}

func (b *eventBroker) startLocked() {
	if !b.started && !b.closed {
		b.started = true
		go b.run()
	}
}

func (b *eventBroker) unsubscribe(sub *eventSub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[sub]; ok {
		delete(b.subs, sub)
		close(sub.ch)
	}
}

func (b *eventBroker) subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// close stops the watcher and ends every stream.
func (b *eventBroker) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.stop)
	started := b.started
	for sub := range b.subs {
		delete(b.subs, sub)
		close(sub.ch)
	}
	b.mu.Unlock()
	if started {
		<-b.done
	}
}

// run follows the container store's events (Options.Store, the one follower of Docker's
// events) until the broker closes. A store's relist tells what changed while it did not follow
// Docker; the first one the broker gets is the state from which it reports changes.
func (b *eventBroker) run() {
	defer close(b.done)
	log := b.s.log.WithField("component", "events")
	sub := b.s.store.Subscribe()
	defer sub.Close()
	// life ends when the broker closes.
	life, end := context.WithCancel(context.Background())
	defer end()
	go func() {
		select {
		case <-b.stop:
			end()
		case <-life.Done():
		}
	}()
	first := true
	for {
		var ev store.Event
		select {
		case <-b.stop:
			return
		case ev = <-sub.Events():
		}
		var err error
		// A panic in handling one event is a failure like another: the store relists, and
		// the event is sent then.
		if perr := supervise.Run(log, "following the container store's events", func() {
			if ev.Relist {
				if err = b.relisted(life, ev.Changes, !first); err != nil {
					return
				}
				if first {
					close(b.ready)
					first = false
				} else {
					log.Info("following Docker's events again; missed changes were reported from a relist")
				}
				return
			}
			for _, c := range ev.Changes {
				if err = b.handle(life, c); err != nil {
					return
				}
			}
		}); perr != nil {
			err = perr
		}
		if err != nil && life.Err() == nil {
			log.Warnf("%v; asking the container store to relist", err)
			b.s.store.Resync()
		}
	}
}

// knownOf is what a change tells of one of our containers or sandboxes; false for another
// container the store tracks.
func knownOf(c store.Change) (knownContainer, bool) {
	kind := c.Labels[containerTypeLabel]
	if kind != containerTypeSandbox && kind != containerTypeContainer {
		return knownContainer{}, false
	}
	k := knownContainer{state: containerState(c.State), sandbox: kind == containerTypeSandbox, sandboxID: c.Labels[sandboxIDLabel]}
	if k.sandbox {
		k.sandboxID = c.ID
	}
	return k, true
}

// handle turns one followed Docker event into a CRI event when it changes what the watcher
// knew. It fails when the event could not be built; the event is then left to the next relist.
func (b *eventBroker) handle(ctx context.Context, c store.Change) error {
	k, ok := knownOf(c)
	if !ok {
		return nil
	}
	if c.Action == events.ActionOOM {
		// For ContainerStatus's reason; the die event tells the exit.
		b.s.ooms.mark(c.ID)
		return nil
	}
	if k.sandbox {
		b.s.sandboxes.observe(c.ID, string(c.Action))
	} else if c.Action == events.ActionDie && b.s.nriActive() {
		// A container that exits on its own is stopped for NRI's plugins too (once: a
		// StopContainer may have told them already). Apart, not to hold up the events.
		go supervise.Run(b.s.log, "NRI stop of container "+c.ID, func() { b.s.nriStopContainer(context.Background(), c.ID) })
	}
	var typ runtimeapi.ContainerEventType
	switch c.Action {
	case events.ActionCreate:
		typ, k.state = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerState_CONTAINER_CREATED
	case events.ActionStart:
		typ, k.state = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, runtimeapi.ContainerState_CONTAINER_RUNNING
	case events.ActionDie:
		typ, k.state = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, runtimeapi.ContainerState_CONTAINER_EXITED
	case events.ActionDestroy:
		typ = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	default:
		return nil
	}
	b.mu.Lock()
	old, seen := b.known[c.ID]
	if typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		delete(b.known, c.ID)
		b.s.users.Forget(c.ID)
		b.s.ooms.forget(c.ID)
	} else {
		b.known[c.ID] = k
	}
	b.mu.Unlock()
	if seen && typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT && old.state == k.state {
		return nil // already reported, by a relist
	}
	return b.send(ctx, c.ID, typ, k, c.Time, c.Attributes)
}

// actionOfState is the Docker event that leads to a listed state, for sandboxIndex.observe.
func actionOfState(st runtimeapi.ContainerState) string {
	switch st {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return string(events.ActionStart)
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return string(events.ActionDie)
	}
	return ""
}

// send publishes an event; one that cannot be built (or whose building panicked) is kept for
// the next relist.
func (b *eventBroker) send(ctx context.Context, id string, typ runtimeapi.ContainerEventType, k knownContainer, at time.Time, attrs map[string]string) error {
	b.mu.Lock()
	b.unsent[id] = unsentEvent{typ: typ, k: k}
	b.mu.Unlock()
	err := b.publish(ctx, id, typ, k, at, attrs)
	if err != nil {
		return fmt.Errorf("%v event of %.12s not sent, left to the next relist: %w", typ, id, err)
	}
	b.mu.Lock()
	delete(b.unsent, id)
	b.mu.Unlock()
	return nil
}

// relisted applies the changes a store's relist found to what the watcher knew and, when
// report is set, reports each as the event that would have told it, with the events that could
// not be sent before.
func (b *eventBroker) relisted(ctx context.Context, changes []store.Change, report bool) error {
	b.mu.Lock()
	before := b.known
	now := maps.Clone(before)
	for _, c := range changes {
		if k, ok := knownOf(c); ok && c.Action != events.ActionDestroy {
			now[c.ID] = k
		} else {
			delete(now, c.ID)
		}
	}
	b.known = now
	unsent := b.unsent
	b.unsent = map[string]unsentEvent{}
	b.mu.Unlock()
	// What the sandbox index must know of what the store did not follow. Removed only when
	// the watcher knew it: one created since the relist began is not in it either.
	for _, c := range changes {
		if k, ok := now[c.ID]; ok && k.sandbox {
			b.s.sandboxes.observe(c.ID, actionOfState(k.state))
		} else if old, ok := before[c.ID]; ok && old.sandbox {
			if _, ok := now[c.ID]; !ok {
				b.s.sandboxes.observe(c.ID, string(events.ActionDestroy))
			}
		}
	}
	if !report {
		return nil
	}
	type event struct {
		id  string
		typ runtimeapi.ContainerEventType
		k   knownContainer
	}
	var todo []event
	// Containers before their sandboxes go away, sandboxes before their containers appear.
	for _, sandboxes := range []bool{false, true} {
		for id, old := range before {
			if _, ok := now[id]; !ok && old.sandbox == sandboxes {
				todo = append(todo, event{id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, old})
			}
		}
		// Deleted after an event that was not sent (a destroy, or anything before it).
		for id, u := range unsent {
			_, wasKnown := before[id]
			if _, ok := now[id]; !ok && !wasKnown && u.k.sandbox == sandboxes {
				todo = append(todo, event{id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, u.k})
			}
		}
	}
	for _, sandboxes := range []bool{true, false} {
		for id, k := range now {
			if k.sandbox != sandboxes {
				continue
			}
			old, ok := before[id]
			if !ok {
				todo = append(todo, event{id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, k})
			}
			if ok && old.state == k.state {
				// No change since the last event; unless that event was never sent.
				if u, ok := unsent[id]; ok {
					todo = append(todo, event{id, u.typ, k})
				}
				continue
			}
			switch k.state {
			case runtimeapi.ContainerState_CONTAINER_RUNNING:
				todo = append(todo, event{id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, k})
			case runtimeapi.ContainerState_CONTAINER_EXITED:
				todo = append(todo, event{id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, k})
			}
		}
	}
	at := time.Now()
	for i, ev := range todo {
		if err := b.publish(ctx, ev.id, ev.typ, ev.k, at, nil); err != nil {
			// This one and those after it go to the next relist.
			b.mu.Lock()
			for _, ev := range todo[i:] {
				b.unsent[ev.id] = unsentEvent{typ: ev.typ, k: ev.k}
			}
			b.mu.Unlock()
			return fmt.Errorf("relist: %v event of %.12s not sent: %w", ev.typ, ev.id, err)
		}
	}
	return nil
}

// publish sends an event, with its pod's sandbox status and container statuses, to every
// stream; a stream that cannot take it is ended. It fails, and sends nothing, when Docker could
// not tell the statuses: the kubelet takes an event's statuses as the pod's whole state, so a
// half-empty event would make it believe the pod lost its containers.
func (b *eventBroker) publish(ctx context.Context, id string, typ runtimeapi.ContainerEventType, k knownContainer, at time.Time, attrs map[string]string) error {
	if b.subscribers() == 0 {
		if typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT && k.sandbox {
			b.mu.Lock()
			delete(b.sandboxStatus, id)
			b.mu.Unlock()
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, eventBuildTimeout)
	defer cancel()
	// The store tells an event before it inspects the container again: bring it up to this
	// event before the statuses are read from it.
	if err := b.s.store.Refresh(ctx, id); err != nil {
		return err
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: at.UnixNano()}
	var err error
	if ev.PodSandboxStatus, err = b.sandboxStatusOf(ctx, k.sandboxID, attrs, id == k.sandboxID); err != nil {
		return err
	}
	if k.sandboxID != "" {
		if ev.ContainersStatuses, err = b.s.podContainerStatuses(ctx, k.sandboxID); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT && k.sandbox {
		delete(b.sandboxStatus, id)
	}
	for sub := range b.subs {
		if ev.CreatedAt < sub.since {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			sub.overflow = true
			delete(b.subs, sub)
			close(sub.ch)
		}
	}
	return nil
}

// sandboxStatusOf is the sandbox's current status, or, once Docker has forgotten it, the last
// one sent (or one made from the deleted sandbox's name and labels), marked not ready. It fails
// when Docker could not be asked.
func (b *eventBroker) sandboxStatusOf(ctx context.Context, sandboxID string, attrs map[string]string, self bool) (*runtimeapi.PodSandboxStatus, error) {
	if sandboxID == "" {
		return nil, nil
	}
	resp, err := b.s.podSandboxStatus(ctx, sandboxID, false)
	if err == nil {
		b.mu.Lock()
		b.sandboxStatus[sandboxID] = resp.Status
		b.mu.Unlock()
		return resp.Status, nil
	}
	if dockerUnreachable(err) {
		return nil, err
	}
	b.mu.Lock()
	last := b.sandboxStatus[sandboxID]
	b.mu.Unlock()
	if last == nil && self && attrs != nil {
		if name, err := parseName(attrs["name"]); err == nil {
			dockerLabels := maps.Clone(attrs)
			delete(dockerLabels, "name") // Docker adds the name and image to the labels
			delete(dockerLabels, "image")
			labels, annotations := splitLabels(dockerLabels)
			last = &runtimeapi.PodSandboxStatus{Id: sandboxID, Metadata: name.sandboxMetadata(), Labels: labels, Annotations: annotations, RuntimeHandler: attrs[handlerLabel]}
		}
	}
	if last == nil {
		return nil, nil
	}
	gone := proto.Clone(last).(*runtimeapi.PodSandboxStatus)
	gone.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	return gone, nil
}

// dockerUnreachable tells a failure to ask Docker (down, restarting, timing out), which a later
// try may not meet, from an answer (not found, a container we cannot parse).
func dockerUnreachable(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.Internal, codes.InvalidArgument, codes.FailedPrecondition:
		return false
	}
	return true
}
