package libdocker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// fakeSubscriber is one Events caller: a queue the daemon appends to without blocking, and a
// goroutine that hands the queue out in order.
type fakeSubscriber struct {
	filters filters.Args
	mu      sync.Mutex
	queue   []events.Message
	wake    chan struct{}
	broken  chan error
}

// emit publishes a container event to the subscribers whose filters match; f.mu must be held.
func (f *Fake) emit(c *fakeContainer, action events.Action, extra map[string]string) {
	attrs := map[string]string{"name": c.resp.Name[1:], "image": c.resp.Config.Image}
	for k, v := range c.resp.Config.Labels {
		attrs[k] = v
	}
	for k, v := range extra {
		attrs[k] = v
	}
	f.deliver(events.ContainerEventType, action, events.Actor{ID: c.resp.ID, Attributes: attrs})
}

// emitImage publishes an image event as Docker does: a pull names the reference pulled, the
// others the image ID, with the reference in the name attribute; f.mu must be held.
func (f *Fake) emitImage(action events.Action, id, name string) {
	f.deliver(events.ImageEventType, action, events.Actor{ID: id, Attributes: map[string]string{"name": name}})
}

func (f *Fake) deliver(typ events.Type, action events.Action, actor events.Actor) {
	now := time.Now()
	msg := events.Message{
		Type: typ, Action: action, Scope: "local", Actor: actor,
		Time: now.Unix(), TimeNano: now.UnixNano(),
	}
	for _, sub := range f.subscribers {
		if !sub.matches(msg) {
			continue
		}
		sub.mu.Lock()
		sub.queue = append(sub.queue, msg)
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

func (s *fakeSubscriber) matches(m events.Message) bool {
	fl := s.filters
	return fl.ExactMatch("type", string(m.Type)) && fl.ExactMatch("event", string(m.Action)) &&
		(fl.ExactMatch("container", m.Actor.ID) || fl.ExactMatch("container", m.Actor.Attributes["name"])) &&
		fl.MatchKVList("label", m.Actor.Attributes)
}

// BreakEvents ends every open Events stream with err, as a restart of dockerd does (the real
// client reports io.EOF or a connection error). Later Events calls work again.
func (f *Fake) BreakEvents(err error) {
	if err == nil {
		err = errors.New("unexpected EOF")
	}
	f.mu.Lock()
	subs := f.subscribers
	f.subscribers = nil
	f.mu.Unlock()
	for _, s := range subs {
		s.broken <- err
	}
}

// EventSubscribers is how many Events streams are open.
func (f *Fake) EventSubscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subscribers)
}

// Events implements Client: container events (create, start, die, stop, update, destroy) with
// the container's labels, name and image as attributes, image events (load for AddImage,
// pull, untag, delete), and the type, event, container and label filters. Since and Until are
// not emulated.
func (f *Fake) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs := make(chan events.Message)
	errs := make(chan error, 1)
	f.mu.Lock()
	err := f.enter(ctx, "Events")
	if err == nil {
		err = validateFilters(opts.Filters, "type", "event", "container", "label")
	}
	if err == nil && (opts.Since != "" || opts.Until != "") {
		err = dErr(cerrdefs.ErrInvalidArgument, "libdocker.Fake does not emulate Since/Until")
	}
	if err != nil {
		f.mu.Unlock()
		errs <- err
		close(errs)
		return msgs, errs
	}
	sub := &fakeSubscriber{filters: opts.Filters.Clone(), wake: make(chan struct{}, 1), broken: make(chan error, 1)}
	f.subscribers = append(f.subscribers, sub)
	f.mu.Unlock()

	go func() {
		defer close(errs)
		defer f.unsubscribe(sub)
		for {
			sub.mu.Lock()
			queue := sub.queue
			sub.queue = nil
			sub.mu.Unlock()
			for _, m := range queue {
				select {
				case msgs <- m:
				case <-ctx.Done():
					errs <- fmt.Errorf("Events: %w", ctx.Err())
					return
				case err := <-sub.broken:
					errs <- err
					return
				}
			}
			select {
			case <-sub.wake:
			case <-ctx.Done():
				errs <- fmt.Errorf("Events: %w", ctx.Err())
				return
			case err := <-sub.broken:
				errs <- err
				return
			}
		}
	}()
	return msgs, errs
}

func (f *Fake) unsubscribe(sub *fakeSubscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.subscribers {
		if s == sub {
			f.subscribers = append(f.subscribers[:i], f.subscribers[i+1:]...)
			return
		}
	}
}

func exitCodeAttr(code int) map[string]string {
	return map[string]string{"exitCode": strconv.Itoa(code)}
}
