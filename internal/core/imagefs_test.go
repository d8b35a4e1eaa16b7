package core

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// The inode count of a layers directory is taken again once it is older than its age: a count
// of a directory that grew is followed by the new count.
func TestInodeCountIsTakenAgainWhenOld(t *testing.T) {
	s := newTestService(t, libdocker.NewFake(), Options{})
	l := s.layers
	l.countsAge = 20 * time.Millisecond
	dir := t.TempDir()
	ctx := context.Background()
	first, ok := l.inodes(ctx, dir)
	if !ok {
		t.Fatal("no first count")
	}
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Asked less often than the age: each call finds the last count old.
	var n uint64
	if !testutil.PollUntil(5*time.Second, 0, func() bool {
		time.Sleep(3 * l.countsAge)
		n, _ = l.inodes(ctx, dir)
		return n == first+2
	}) {
		t.Fatalf("count %d, want %d once the first count is old", n, first+2)
	}
}
