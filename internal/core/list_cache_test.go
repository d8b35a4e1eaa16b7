package core

import (
	"context"
	"maps"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// A service whose lists come from a synced store in front of fake, networked by a CNI-like
// plugin (so that sandboxes have checkpoints), as cri-dockerd serves.
func newStoreService(t *testing.T, fake *libdocker.Fake) (*Service, *store.Store) {
	t.Helper()
	st := store.Wrap(fake, store.Options{Label: TrackedLabel})
	if err := st.Start(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s := newTestServiceOn(t, fake, fake, Options{NetworkPlugin: "cni", Network: &fakeNet{}, RootDirectory: t.TempDir(), Store: st})
	s.pins = &fakePins{}
	return s, st
}

// inStep reports whether the store lists what Docker (the fake) lists: the events of changes
// behind our back have all been seen.
func inStep(t *testing.T, st *store.Store, fake *libdocker.Fake) bool {
	t.Helper()
	states := func(c libdocker.Client) map[string]string {
		list, err := c.ListContainers(context.Background(), container.ListOptions{All: true, Filters: libdocker.LabelFilter(TrackedLabel)})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range list {
			out[c.ID] = c.State
		}
		return out
	}
	return maps.Equal(states(st), states(fake))
}

// listsDiffer is what the kept lists answer and a list built afresh does not, for a few
// filters; "" when they agree.
func listsDiffer(t *testing.T, s *Service, pod string) string {
	t.Helper()
	ctx := context.Background()
	running := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	for _, f := range []*runtimeapi.ContainerFilter{nil, {}, {PodSandboxId: pod}, {State: running},
		{LabelSelector: map[string]string{"tier": "web"}}, {Id: "0"}} {
		kept, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := s.listContainers(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		byID := func(l []*runtimeapi.Container) func(i, j int) bool {
			return func(i, j int) bool { return l[i].Id < l[j].Id }
		}
		a, b := append([]*runtimeapi.Container(nil), kept.Containers...), fresh.Containers
		sort.Slice(a, byID(a))
		sort.Slice(b, byID(b))
		if !proto.Equal(&runtimeapi.ListContainersResponse{Containers: a}, &runtimeapi.ListContainersResponse{Containers: b}) {
			return "ListContainers(" + f.String() + "):\nkept  " + (&runtimeapi.ListContainersResponse{Containers: a}).String() + "\nfresh " + fresh.String()
		}
	}
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	for _, f := range []*runtimeapi.PodSandboxFilter{nil, {}, {Id: pod}, {State: ready}, {LabelSelector: map[string]string{"app": "a"}}} {
		kept, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := s.listPodSandbox(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		byID := func(l []*runtimeapi.PodSandbox) func(i, j int) bool {
			return func(i, j int) bool { return l[i].Id < l[j].Id }
		}
		a, b := append([]*runtimeapi.PodSandbox(nil), kept.Items...), fresh.Items
		sort.Slice(a, byID(a))
		sort.Slice(b, byID(b))
		if !proto.Equal(&runtimeapi.ListPodSandboxResponse{Items: a}, &runtimeapi.ListPodSandboxResponse{Items: b}) {
			return "ListPodSandbox(" + f.String() + "):\nkept  " + (&runtimeapi.ListPodSandboxResponse{Items: a}).String() + "\nfresh " + fresh.String()
		}
	}
	return ""
}

// The lists kept between changes (list_cache.go) answer exactly what lists built afresh do,
// after each of our own calls and each change behind our back (once the store has seen
// Docker's events of it), and a quiet node's relist is the same answer
// again, not one built again.
func TestKeptListsAreWhatFreshListsSay(t *testing.T) {
	fake := libdocker.NewFake()
	s, st := newStoreService(t, fake)
	kept := map[string]proto.Message{}
	s.opts.KeepReply = func(m proto.Message) { kept[string(m.ProtoReflect().Descriptor().Name())] = m }
	ctx := context.Background()
	var pod, other, app, second string
	ok := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var cfg *runtimeapi.PodSandboxConfig
	agree := func(step string) {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return inStep(t, st, fake) }, "after %s: the store did not see Docker's events", step)
		if diff := listsDiffer(t, s, pod); diff != "" {
			t.Fatalf("after %s: %s", step, diff)
		}
	}
	for _, step := range []struct {
		name string
		do   func()
	}{
		{"a pod", func() { pod, cfg = runPod(t, s, "a", "") }},
		{"a container", func() { app = createContainer(t, s, pod, cfg, "app") }},
		{"its start", func() { ok(s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: app})) }},
		{"another pod and container", func() {
			var ocfg *runtimeapi.PodSandboxConfig
			other, ocfg = runPod(t, s, "b", "")
			second = startedContainer(t, s, other, ocfg, "side")
		}},
		{"an exit behind our back", func() {
			if err := fake.ExitContainer(app, 137); err != nil {
				t.Fatal(err)
			}
		}},
		{"docker rm -f of a container", func() { removeBehindOurBack(t, fake, second) }},
		{"docker rm -f of a sandbox (gone: its checkpoint is left)", func() { removeBehindOurBack(t, fake, other) }},
		{"the gone sandbox's removal (only a checkpoint changes)", func() {
			ok(s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: other}))
		}},
		{"a stop", func() { ok(s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})) }},
	} {
		step.do()
		agree(step.name)
	}

	first, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{}})
	sandboxes, _ := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	sandboxesAgain, _ := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if first != again || sandboxes != sandboxesAgain {
		t.Error("two relists with nothing changed in between were built twice, want the kept answer")
	}
	if kept["ListContainersResponse"] != first || kept["ListPodSandboxResponse"] != sandboxes {
		t.Error("the kept answers were not given to KeepReply (the codec would encode them each time)")
	}
	ok(s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}))
	if after, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); after == first || len(after.Containers) != 0 {
		t.Errorf("after the pod's removal: %d containers (the kept list again: %v)", len(after.Containers), after == first)
	}
}
