// Package replycodec is gRPC's proto codec, except for replies the service keeps and gives
// again unchanged (the kubelet's relist on a quiet node, keptListCache in package core): each of those is
// encoded once, not once per call. Encoding a 100-pod list was a quarter of an idle node's
// cri-dockerd CPU.
package replycodec

import (
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one is in front of
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec encodes messages as gRPC's "proto" codec does. Install it with grpc.ForceServerCodecV2.
type Codec struct {
	base encoding.CodecV2
	mu   sync.Mutex
	// kept is the last message given to Keep, per message type.
	kept map[protoreflect.FullName]*keptReply
}

type keptReply struct {
	msg  proto.Message
	once sync.Once
	data []byte
	err  error
}

// New is a Codec in front of gRPC's proto codec.
func New() *Codec {
	return &Codec{base: encoding.GetCodecV2("proto"), kept: map[protoreflect.FullName]*keptReply{}}
}

// Keep tells the codec that m will be replied more than once and never changed again. Until
// another message of its type is kept, replying m sends the bytes of its first encoding.
func (c *Codec) Keep(m proto.Message) {
	c.mu.Lock()
	c.kept[m.ProtoReflect().Descriptor().FullName()] = &keptReply{msg: m}
	c.mu.Unlock()
}

// Marshal encodes v: a kept message from its one encoding, any other as gRPC's codec does.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(proto.Message); ok {
		c.mu.Lock()
		k := c.kept[m.ProtoReflect().Descriptor().FullName()]
		c.mu.Unlock()
		if k != nil && k.msg == m {
			k.once.Do(func() { k.data, k.err = proto.Marshal(m) })
			if k.err == nil {
				// A SliceBuffer's Free does nothing: the bytes stay ours, read only.
				return mem.BufferSlice{mem.SliceBuffer(k.data)}, nil
			}
		}
	}
	return c.base.Marshal(v)
}

// Unmarshal decodes as gRPC's codec does.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

// Name is "proto": clients see the codec they expect.
func (c *Codec) Name() string { return c.base.Name() }
