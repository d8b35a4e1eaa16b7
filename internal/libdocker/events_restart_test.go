package libdocker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// pingScript is a Docker that does not answer pings until upAt.
type pingScript struct {
	mu    sync.Mutex
	upAt  time.Time
	pings int
}

func (p *pingScript) ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pings++
	if time.Now().Before(p.upAt) {
		return ConnectionFailed("unix:///test.sock")
	}
	return nil
}

// A retry after dockerd was unreachable comes as soon as it answers (within one ping interval),
// however large the backoff; one whose Docker answers waits the backoff.
func TestRetryWaitReturnsWhenDockerAnswersAgain(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	for _, tc := range []struct {
		name    string
		downFor time.Duration
		backoff time.Duration
		min     time.Duration // the wait at least
		max     time.Duration // and at most (generous: a loaded machine)
	}{
		{"down, then up: no backoff", 300 * time.Millisecond, 5 * time.Second, 300 * time.Millisecond, 2 * time.Second},
		{"up: the backoff", 0, 200 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p := &pingScript{upAt: start.Add(tc.downFor)}
			if err := RetryWait(context.Background(), p.ping, interval, tc.backoff); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < tc.min || took > tc.max {
				t.Errorf("waited %v, want %v to %v", took, tc.min, tc.max)
			}
			if tc.downFor > 0 {
				// Pinged every interval while down: about downFor/interval pings, not one per backoff.
				if want := int(tc.downFor / interval / 2); p.pings < want {
					t.Errorf("%d pings while Docker was down for %v, want at least %d", p.pings, tc.downFor, want)
				}
				if after := time.Since(p.upAt); after > time.Second {
					t.Errorf("returned %v after Docker answered", after)
				}
			} else if p.pings != 1 {
				t.Errorf("%d pings while Docker answered, want 1 (then the backoff)", p.pings)
			}
		})
	}
}

func TestRetryWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	for _, up := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		p := &pingScript{upAt: time.Now().Add(time.Hour)}
		if up {
			p.upAt = time.Time{}
		}
		done := make(chan error, 1)
		go func() { done <- RetryWait(ctx, p.ping, 10*time.Millisecond, time.Hour) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Docker up %v: RetryWait gave %v after its context ended, want context.Canceled", up, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Docker up %v: RetryWait did not end with its context", up)
		}
	}
}
