package core

import (
	"google.golang.org/protobuf/proto"
)

// listKey is the key under which ListPodSandbox and ListContainers keep what they build
// (Service.sandboxList, containerList): the store's list generation and the checkpoint
// directory's writes, which are all a list is made of. False when lists go to Docker (no store,
// or it is not synced): nothing is kept then.
func (s *Service) listKey() (listKeyCounts, bool) {
	gen, fromMemory := s.store.ListGeneration()
	if !fromMemory {
		return listKeyCounts{}, false
	}
	var writes uint64
	if s.checkpoints != nil {
		writes = s.checkpoints.writes.Load()
	}
	return listKeyCounts{gen, writes}, true
}

// keptList is the whole list kept in c, built by build when none is kept for the current key
// (and then given to Options.KeepReply: the gRPC codec encodes it once, package replycodec).
// kept is false when lists go to Docker (see listKey): the caller lists as before then.
func keptList[R proto.Message](s *Service, c *keptListCache[R], build func() (R, error)) (all R, kept bool, err error) {
	key, ok := s.listKey()
	if !ok {
		return all, false, nil
	}
	all, err = c.Get(key, func() (R, error) {
		all, err := build()
		if err == nil && s.opts.KeepReply != nil {
			s.opts.KeepReply(all)
		}
		return all, err
	})
	return all, true, err
}
