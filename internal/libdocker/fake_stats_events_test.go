package libdocker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

func TestFakeStatsAreOneShotSamplesOfRunningContainers(t *testing.T) {
	f := newTestFake(t)
	ctx := context.Background()
	id := mustCreate(t, f, "ctr", nil, "")
	st, err := f.ContainerStats(ctx, id)
	if err != nil || !st.Read.IsZero() || st.ID != id {
		t.Errorf("stats of a created container: %+v, %v; want a zero sample", st, err)
	}
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err = f.ContainerStats(ctx, id)
	if err != nil || st.Read.IsZero() || st.MemoryStats.Usage == 0 || !st.PreRead.IsZero() || st.Networks["eth0"].RxBytes == 0 {
		t.Errorf("stats of a running container: %+v, %v", st, err)
	}
	if err := f.SetStats(id, container.StatsResponse{PidsStats: container.PidsStats{Current: 7}}); err != nil {
		t.Fatal(err)
	}
	if st, _ = f.ContainerStats(ctx, id); st.PidsStats.Current != 7 || st.ID != id {
		t.Errorf("set stats: %+v", st)
	}
	if _, err := f.ContainerStats(ctx, "nope"); !cerrdefs.IsNotFound(err) {
		t.Errorf("stats of an unknown container: %v", err)
	}
}

func TestFakeUpdateKeepsZeroFieldsAndChecksSwap(t *testing.T) {
	f := newTestFake(t)
	ctx := context.Background()
	id, err := f.CreateContainer(ctx, "ctr", &container.Config{Image: "busybox"}, &container.HostConfig{Resources: container.Resources{Memory: 64 << 20, CPUShares: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := f.InspectContainer(ctx, id); c.HostConfig.MemorySwap != 128<<20 {
		t.Errorf("MemorySwap %d, want Docker's default of twice the memory", c.HostConfig.MemorySwap)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 256 << 20}}); !cerrdefs.IsConflict(err) ||
		!strings.Contains(err.Error(), "Memory limit should be smaller than already set memoryswap limit") {
		t.Errorf("memory above memory+swap without swap: %v", err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 256 << 20, MemorySwap: 128 << 20}}); !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("memory+swap below memory: %v", err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.InspectContainer(ctx, id); c.HostConfig.Memory != 256<<20 || c.HostConfig.CPUShares != 512 {
		t.Errorf("after update: %+v", c.HostConfig.Resources)
	}
}

// Docker compares a new memory limit with the container's memory+swap limit also when the
// container has none (0): any limit then needs MemorySwap in the same update.
func TestFakeUpdateOfAContainerWithoutMemoryLimitNeedsSwap(t *testing.T) {
	f := newTestFake(t)
	ctx := context.Background()
	id, err := f.CreateContainer(ctx, "ctr", &container.Config{Image: "busybox"}, &container.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 128 << 20}}); !cerrdefs.IsConflict(err) {
		t.Errorf("memory without swap on a container without a limit: %v, want Docker's conflict", err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 128 << 20, MemorySwap: 128 << 20}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.InspectContainer(ctx, id); c.HostConfig.Memory != 128<<20 || c.HostConfig.MemorySwap != 128<<20 {
		t.Errorf("after update: %+v", c.HostConfig.Resources)
	}
	if _, err := f.CreateContainer(ctx, "tiny", &container.Config{Image: "busybox"}, &container.HostConfig{Resources: container.Resources{Memory: 1 << 20}}); !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("create with 1 MiB: %v, want Docker's 6MB minimum", err)
	}
}

func TestFakeEventsFollowTheLifecycleAndBreak(t *testing.T) {
	f := newTestFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, errs := f.Events(ctx, events.ListOptions{Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("label", "app=web"))})
	other := mustCreate(t, f, "other", nil, "")
	id := mustCreate(t, f, "web", map[string]string{"app": "web"}, "")
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.StartContainer(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := f.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveContainer(ctx, id, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []events.Action
	for len(got) < 5 {
		select {
		case m := <-msgs:
			if m.Actor.ID != id || m.Actor.Attributes["app"] != "web" || m.Actor.Attributes["name"] != "web" {
				t.Errorf("event %+v", m)
			}
			got = append(got, m.Action)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far: %v", got)
		}
	}
	if want := []events.Action{"create", "start", "die", "stop", "destroy"}; len(got) != len(want) || got[0] != want[0] || got[2] != want[2] || got[4] != want[4] {
		t.Errorf("events %v, want %v", got, want)
	}
	f.BreakEvents(errors.New("unexpected EOF"))
	select {
	case err := <-errs:
		if err == nil || err.Error() != "unexpected EOF" {
			t.Errorf("stream ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end")
	}
	if n := f.EventSubscribers(); n != 0 {
		t.Errorf("%d subscribers after the break", n)
	}
	_, errs = f.Events(ctx, events.ListOptions{Since: "1"})
	if err := <-errs; !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("Since: %v", err)
	}
}
