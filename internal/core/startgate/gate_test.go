package startgate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// enter starts a goroutine that enters g with priority p and records its name in order once
// admitted; it returns a channel that gets the leave function.
func enter(t *testing.T, g *Gate, p Priority, name string, order *[]string, mu *sync.Mutex) <-chan func() {
	t.Helper()
	got := make(chan func(), 1)
	go func() {
		leave, err := g.Enter(context.Background(), p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		mu.Lock()
		*order = append(*order, name)
		mu.Unlock()
		got <- leave
	}()
	return got
}

func waitQueued(t *testing.T, g *Gate, n int) {
	t.Helper()
	if !testutil.PollUntil(5*time.Second, time.Millisecond, func() bool { return g.Waiting() == n }) {
		t.Fatalf("%d waiting, want %d", g.Waiting(), n)
	}
}

// At most the gate's slots are in at once; the waiting starts go in as slots come back, a
// pod's containers before sandboxes, each kind in arrival order.
func TestContainersGoBeforeSandboxesEachInArrivalOrder(t *testing.T) {
	g := New(2, time.Minute)
	var order []string
	var mu sync.Mutex
	leave1 := <-enter(t, g, Sandbox, "s1", &order, &mu)
	leave2 := <-enter(t, g, Sandbox, "s2", &order, &mu)

	var queued []<-chan func()
	for _, w := range []struct {
		p    Priority
		name string
	}{{Sandbox, "s3"}, {Sandbox, "s4"}, {Container, "c1"}, {Container, "c2"}} {
		queued = append(queued, enter(t, g, w.p, w.name, &order, &mu))
		waitQueued(t, g, len(queued)) // arrival order is the order of these calls
	}
	// Slots come back one at a time: c1, c2 go in first, then s3 and s4.
	leave1()
	c1 := <-queued[2]
	leave2()
	c2 := <-queued[3]
	c1()
	s3 := <-queued[0]
	c2()
	s4 := <-queued[1]
	s3()
	s4()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"s1", "s2", "c1", "c2", "s3", "s4"}
	for i := range want {
		if len(order) != len(want) || order[i] != want[i] {
			t.Fatalf("admitted %v, want %v", order, want)
		}
	}
	if g.busy != 0 || g.Waiting() != 0 {
		t.Errorf("after every start left: %d busy, %d waiting", g.busy, g.Waiting())
	}
}

// A start that waited maxWait goes in without a slot (the slots' holders may hang in a stuck
// runtime); one whose caller gave up gets its context's error and no slot.
func TestAWaitIsBounded(t *testing.T) {
	g := New(1, 50*time.Millisecond)
	hold, err := g.Enter(context.Background(), Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	leave, err := g.Enter(context.Background(), Container)
	if err != nil || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("Enter behind a held slot: %v after %v, want in after maxWait", err, time.Since(start))
	}
	leave() // not a slot: gives nothing back
	if g.busy != 1 || g.Waiting() != 0 {
		t.Fatalf("after the bounded wait: %d busy, %d waiting, want 1 and 0", g.busy, g.Waiting())
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { waitQueued(t, g, 1); cancel() }()
	if _, err := g.Enter(ctx, Sandbox); !errors.Is(err, context.Canceled) {
		t.Errorf("Enter with its context ended: %v, want Canceled", err)
	}
	hold()
	if g.busy != 0 || g.Waiting() != 0 {
		t.Errorf("after the holder left: %d busy, %d waiting, want 0 and 0", g.busy, g.Waiting())
	}
}

// A gate without slots, or no gate, admits everything at once.
func TestNoSlotsNoBound(t *testing.T) {
	for _, g := range []*Gate{nil, New(0, time.Minute)} {
		for range 100 {
			if _, err := g.Enter(context.Background(), Sandbox); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Under concurrent use the slots are never exceeded and every start gets in.
func TestSlotsAreNeverExceeded(t *testing.T) {
	g := New(3, time.Minute)
	var mu sync.Mutex
	in, peak := 0, 0
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leave, err := g.Enter(context.Background(), Priority(i%2))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			in++
			peak = max(peak, in)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			in--
			mu.Unlock()
			leave()
		}()
	}
	wg.Wait()
	if peak > 3 || peak < 2 {
		t.Errorf("peak of %d starts in at once, want at most the 3 slots (and more than one)", peak)
	}
	if g.busy != 0 || g.Waiting() != 0 {
		t.Errorf("after all: %d busy, %d waiting", g.busy, g.Waiting())
	}
}
