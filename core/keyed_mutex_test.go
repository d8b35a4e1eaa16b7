package core

import (
	"sync"
	"testing"
)

// A key's lock is forgotten once its last holder unlocks, however many waited for it: a node
// that sees thousands of images and containers keeps no lock for each key it ever saw.
func TestKeyedMutexForgetsKeysAfterTheLastUnlock(t *testing.T) {
	var k keyedMutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.lock("image")()
		}()
	}
	wg.Wait()
	k.lock("other")()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.locks) != 0 {
		t.Errorf("locks of %d keys kept after every unlock", len(k.locks))
	}
}
