package core

import (
	"google.golang.org/protobuf/proto"

	"github.com/cri-dockerd/cri-dockerd/listcache"
)

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

// keepReply passes a whole list just built, which is given again unchanged until the next
// change, to Options.KeepReply (the gRPC codec then encodes it once, package replycodec).
func (s *Service) keepReply(m proto.Message) {
	if s.opts.KeepReply != nil {
		s.opts.KeepReply(m)
	}
}
