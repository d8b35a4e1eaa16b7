package keyedmutex

import (
	"sync"
	"testing"
	"time"
)

// A key's lock is forgotten once its last holder unlocks, however many waited for it.
func TestKeysAreForgottenAfterTheLastUnlock(t *testing.T) {
	var k Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.Lock("image")()
		}()
	}
	wg.Wait()
	k.Lock("other")()
	if n := k.held(); n != 0 {
		t.Errorf("locks of %d keys kept after every unlock", n)
	}
}

// One key's holders go one at a time; another key's holder does not wait for them.
func TestOneKeyAtATimeOtherKeysFree(t *testing.T) {
	var k Mutex
	unlock := k.Lock("a")
	second := make(chan struct{})
	go func() {
		defer close(second)
		k.Lock("a")()
	}()
	k.Lock("b")() // would hang if keys shared one lock
	select {
	case <-second:
		t.Fatal("a second holder of key a got it while the first held it")
	case <-time.After(50 * time.Millisecond):
	}
	if n := k.held(); n != 1 {
		t.Errorf("%d keys held or waited for, want 1 (a)", n)
	}
	unlock()
	<-second
	if n := k.held(); n != 0 {
		t.Errorf("locks of %d keys kept after every unlock", n)
	}
}

// held is the number of keys with a lock held or waited for.
func (k *Mutex) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
