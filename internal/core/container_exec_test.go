package core

import (
	"bytes"
	"testing"
)

// ExecSync keeps the first maxExecOutput bytes of a stream and drops the rest, however Docker
// splits the stream into frames; every write succeeds, so the copy goes on to the exit code.
func TestExecOutputKeepsTheFirstMaxExecOutputBytes(t *testing.T) {
	var b cappedBuffer
	for i, n := range []int{maxExecOutput - 10, 20, 5} {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		if w, err := b.Write(p); w != n || err != nil {
			t.Fatalf("write %d of %d bytes = %d, %v", i, n, w, err)
		}
	}
	got := b.Bytes()
	if len(got) != maxExecOutput || got[maxExecOutput-11] != 'a' || got[maxExecOutput-10] != 'b' || got[maxExecOutput-1] != 'b' {
		t.Errorf("kept %d bytes ending %q, want %d ending in ten b's", len(got), got[max(0, len(got)-12):], maxExecOutput)
	}
}
