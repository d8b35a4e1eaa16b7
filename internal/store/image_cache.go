package store

import (
	"sync"

	"github.com/docker/docker/api/types/image"
)

// imageCache holds image inspects by the reference asked (an ID or a name). An entry is copied
// out to each reader; one that was asked before the last clear is not stored (it may predate
// the event that cleared it).
type imageCache struct {
	mu    sync.Mutex
	gen   uint64
	byRef map[string]*image.InspectResponse
}

func (c *imageCache) get(id string) (*image.InspectResponse, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img, ok := c.byRef[id]
	if !ok {
		return nil, false
	}
	cp := *img
	cp.RepoTags = append([]string(nil), img.RepoTags...)
	cp.RepoDigests = append([]string(nil), img.RepoDigests...)
	return &cp, true
}

func (c *imageCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *imageCache) put(id string, img *image.InspectResponse, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		cp := *img
		cp.RepoTags = append([]string(nil), img.RepoTags...)
		cp.RepoDigests = append([]string(nil), img.RepoDigests...)
		c.byRef[id] = &cp
	}
}

func (c *imageCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.byRef)
}
