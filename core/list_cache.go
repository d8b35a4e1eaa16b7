package core

import "github.com/cri-dockerd/cri-dockerd/listcache"

// listGenerations is what the container store (package store) tells of its lists.
type listGenerations interface {
	ListGeneration() (gen uint64, fromMemory bool)
}

// listKey is the key under which ListPodSandbox and ListContainers keep what they build
// (Service.sandboxList, containerList): the store's list generation and the checkpoint
// directory's writes, which are all a list is made of. False when lists go to Docker (no store,
// or it is not synced): nothing is kept then.
func (s *Service) listKey() (listcache.Key, bool) {
	g, ok := s.docker.(listGenerations)
	if !ok {
		return listcache.Key{}, false
	}
	gen, fromMemory := g.ListGeneration()
	if !fromMemory {
		return listcache.Key{}, false
	}
	var writes uint64
	if s.checkpoints != nil {
		writes = s.checkpoints.writes.Load()
	}
	return listcache.Key{gen, writes}, true
}
