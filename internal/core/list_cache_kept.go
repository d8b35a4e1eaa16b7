package core

// keptListCache keeps the last CRI list built from sources that count their changes (the
// store's list generation, the checkpoint directory's writes). The kubelet relists every
// second, and on a quiet node nothing changed since the last time: the same answer is given
// again instead of being built again from 100s of containers.

import "sync"

// listKeyCounts is the change counts of a list's sources when it was built.
type listKeyCounts [2]uint64

// keptListCache holds one value and the key it was built at.
type keptListCache[T any] struct {
	mu    sync.Mutex
	key   listKeyCounts
	value T
	valid bool
}

// Get is the value built at key, built now by build if the one held is of another key (or
// none). A failed build is not kept.
//
// The key must be read before build runs: what build sees is then at least as new as the
// key, and a value built while a source changed is kept under a key that is already old, so
// it is never given out.
func (c *keptListCache[T]) Get(key listKeyCounts, build func() (T, error)) (T, error) {
	c.mu.Lock()
	if c.valid && c.key == key {
		v := c.value
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := build()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	c.key, c.value, c.valid = key, v, true
	c.mu.Unlock()
	return v, nil
}
