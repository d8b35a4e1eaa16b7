package core

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sendChunks puts in one message items that fill it exactly, and never sends an empty message,
// not even before an item larger than a message.
func TestSendChunksAtTheMessageSize(t *testing.T) {
	item := func(size int) *wrapperspb.BytesValue {
		// A BytesValue of n bytes encodes as a tag, a varint length of 3 bytes (n >= 16 KiB) and n bytes.
		v := wrapperspb.Bytes(make([]byte, size-4))
		if proto.Size(v) != size {
			t.Fatalf("item of %d bytes, want %d", proto.Size(v), size)
		}
		return v
	}
	sizes := func(items []*wrapperspb.BytesValue) [][]int {
		var out [][]int
		if err := sendChunks(items, func(c []*wrapperspb.BytesValue) error {
			var s []int
			for _, it := range c {
				s = append(s, proto.Size(it))
			}
			out = append(out, s)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	half := streamChunkBytes / 2
	if got := sizes([]*wrapperspb.BytesValue{item(half), item(half), item(half)}); len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 {
		t.Errorf("items of half a message each sent as %v, want two, then one", got)
	}
	big := streamChunkBytes + 1000
	if got := sizes([]*wrapperspb.BytesValue{item(big), item(100000)}); len(got) != 2 || len(got[0]) != 1 || got[0][0] != big || len(got[1]) != 1 {
		t.Errorf("an item larger than a message, then a small one, sent as %v, want each alone", got)
	}
}
