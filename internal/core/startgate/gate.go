// Package startgate bounds how many container starts cri-dockerd asks of Docker at once, and
// orders those that wait: a pod's app containers before other pods' sandboxes.
//
// A node that gets 100 pods at once (a reboot, a drain elsewhere) has the kubelet call
// RunPodSandbox for all of them together. Docker then starts 100 pause containers side by side
// on a few cores, each start slowed by all the others, and every pod reaches Running near the
// end of the batch (figures in docs/benchmarks.md). Admitting a few starts at a time, and a
// pod's containers before the next pods' sandboxes, lets the first pods finish first, as a
// queue does, without making the batch longer: Docker's work per start is the same, and a
// start that waits for a slot is a start that would have shared the cores with all the others.
//
// A start that has waited maxWait goes in without a slot: a runtime whose starts hang must
// not stop every other pod of the node from starting.
package startgate

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Priority orders the starts that wait for a slot.
type Priority int

const (
	// Sandbox is the start of a pod's sandbox (pause) container.
	Sandbox Priority = iota
	// Container is the start of a pod's app, init or sidecar container: served before any
	// sandbox, since its pod is one step from Running.
	Container
	priorities
)

// Gate admits at most a number of starts at once. The zero Gate admits every start.
type Gate struct {
	slots   int
	maxWait time.Duration

	mu      sync.Mutex
	busy    int
	waiting [priorities]list.List // of *waiter, in arrival order
}

type waiter struct {
	admitted chan struct{} // closed when a slot is handed to it
}

// New is a gate of slots starts at once (no bound when slots is not positive), whose waiters
// go in without a slot after maxWait.
func New(slots int, maxWait time.Duration) *Gate {
	return &Gate{slots: slots, maxWait: maxWait}
}

// Enter waits for a slot. It returns the function that gives the slot back (call it once the
// start returned), or ctx's error if ctx ended first.
func (g *Gate) Enter(ctx context.Context, p Priority) (leave func(), err error) {
	if g == nil || g.slots <= 0 {
		return func() {}, nil
	}
	g.mu.Lock()
	if g.busy < g.slots && g.queued() == 0 {
		g.busy++
		g.mu.Unlock()
		return g.leave, nil
	}
	w := &waiter{admitted: make(chan struct{})}
	elem := g.waiting[p].PushBack(w)
	g.mu.Unlock()

	timeout := time.NewTimer(g.maxWait)
	defer timeout.Stop()
	select {
	case <-w.admitted:
		return g.leave, nil
	case <-timeout.C:
		err = nil
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-w.admitted:
		// Handed a slot as it gave up waiting: it holds it after all.
		return g.leave, nil
	default:
	}
	g.waiting[p].Remove(elem)
	if err != nil {
		return nil, err
	}
	return func() {}, nil // waited maxWait: in without a slot
}

// leave gives a slot back: to the first waiter of the highest priority, if any.
func (g *Gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for p := priorities - 1; p >= 0; p-- {
		if front := g.waiting[p].Front(); front != nil {
			g.waiting[p].Remove(front)
			close(front.Value.(*waiter).admitted)
			return // the slot passes to it: busy stays
		}
	}
	g.busy--
}

// queued is how many starts wait; g.mu must be held.
func (g *Gate) queued() int {
	n := 0
	for p := range g.waiting {
		n += g.waiting[p].Len()
	}
	return n
}

// Waiting is how many starts wait for a slot now.
func (g *Gate) Waiting() int {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued()
}
