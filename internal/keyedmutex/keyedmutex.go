// Package keyedmutex serialises work per key (a container, an image) without one global lock,
// and keeps no lock for a key nobody holds or waits for: a node that sees thousands of
// containers and images keeps none for each key it ever saw.
package keyedmutex

import "sync"

// Mutex is one mutex per key. The zero value is ready to use.
type Mutex struct {
	mu    sync.Mutex
	locks map[string]*lock
}

type lock struct {
	sync.Mutex
	users int
}

// Lock locks key and returns the function that unlocks it.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*lock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &lock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()

	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
