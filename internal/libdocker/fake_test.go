package libdocker

import (
	"context"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
)

const busyboxID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// newTestFake has busybox:latest (ID busyboxID, USER nobody) and a runtime "broken" at a path.
func newTestFake(t *testing.T) *Fake {
	t.Helper()
	f := NewFake()
	f.AddImage(FakeImage(busyboxID, "nobody", "busybox"))
	f.AddRuntime("broken", "/usr/local/bin/broken-runc")
	f.BreakRuntime("broken")
	return f
}

func mustCreate(t *testing.T, f *Fake, name string, labels map[string]string, runtime string) string {
	t.Helper()
	id, err := f.CreateContainer(context.Background(), name,
		&container.Config{Image: "busybox", Labels: labels}, &container.HostConfig{Runtime: runtime})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return id
}

// TestConcurrentUse is meant for -race: the fake is shared by concurrent CRI calls.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := "c" + string(rune('a'+i)) + "x"
			id, err := f.CreateContainer(ctx, name, &container.Config{Image: "busybox"}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			_ = f.StartContainer(ctx, id)
			_, _ = f.ListContainers(ctx, container.ListOptions{All: true})
			_ = f.RemoveContainer(ctx, id, container.RemoveOptions{Force: true})
		})
	}
	wg.Wait()
	if n := len(f.Containers()); n != 0 || f.Calls("CreateContainer") != 8 {
		t.Errorf("containers %d, creates %d", n, f.Calls("CreateContainer"))
	}
}
