package store

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

const testLabel = "io.kubernetes.docker.type"

var testImage = "busybox:1.36"

func newFake() *libdocker.Fake {
	fake := libdocker.NewFake()
	fake.AddImage(libdocker.FakeImage("", "", testImage))
	return fake
}

// started is a synced store in front of fake.
func started(t *testing.T, fake *libdocker.Fake) *Store {
	t.Helper()
	s := Wrap(fake, Options{Label: testLabel})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx, 10*time.Millisecond); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	if !s.Synced() {
		t.Fatal("not synced after Start")
	}
	return s
}

// create makes a tracked (kind "container") or untracked (kind "") container through c.
func create(t *testing.T, c libdocker.Client, name, kind string) string {
	t.Helper()
	labels := map[string]string{"app": name}
	if kind != "" {
		labels[testLabel] = kind
	}
	id, err := c.CreateContainer(context.Background(), "ctr-"+name, &container.Config{Image: testImage, Labels: labels}, &container.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// same checks that the store's inspect of id is what Docker (the fake) says, field for field.
func same(t *testing.T, s *Store, fake *libdocker.Fake, id string) {
	t.Helper()
	want, werr := fake.InspectContainer(context.Background(), id)
	hits := s.Hits()
	got, gerr := s.InspectContainer(context.Background(), id)
	if (werr == nil) != (gerr == nil) || (werr != nil && libdocker.IsNotFound(werr) != libdocker.IsNotFound(gerr)) {
		t.Fatalf("inspect %.12s: store says %v, Docker %v", id, gerr, werr)
	}
	if werr != nil {
		return
	}
	if s.Hits() == hits {
		t.Errorf("inspect %.12s went to Docker, want memory", id)
	}
	w, _ := json.Marshal(want)
	g, _ := json.Marshal(got)
	if string(w) != string(g) {
		t.Errorf("inspect %.12s:\nstore  %s\nDocker %s", id, g, w)
	}
}

// eventually waits (bounded) for cond: the store learns of changes behind its back from events.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 2*time.Millisecond, cond, "%s: not within 10 s", what)
}

func stateOf(t *testing.T, s *Store, id string) string {
	t.Helper()
	c, err := s.InspectContainer(context.Background(), id)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return "gone"
		}
		t.Fatal(err)
	}
	return c.State.Status
}

func TestStartFillsTheStoreFromDocker(t *testing.T) {
	fake := newFake()
	a := create(t, fake, "a", "container")
	b := create(t, fake, "b", "podsandbox")
	if err := fake.StartContainer(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	foreign := create(t, fake, "docker-run", "")
	s := started(t, fake)
	if s.Len() != 2 {
		t.Errorf("%d tracked, want the 2 with label %s", s.Len(), testLabel)
	}
	fake.ResetCalls()
	same(t, s, fake, a)
	same(t, s, fake, b)
	if n := fake.Calls("InspectContainer"); n != 2 { // same's own two
		t.Errorf("Docker was inspected %d times, want only by the test", n)
	}
	// Not tracked: Docker answers.
	misses := s.Misses()
	if _, err := s.InspectContainer(context.Background(), foreign); err != nil || s.Misses() != misses+1 {
		t.Errorf("inspect of an untracked container: %v (misses %d -> %d)", err, misses, s.Misses())
	}
}

func TestOwnCallsAreReadBackAtOnce(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	id := create(t, s, "a", "container")
	same(t, s, fake, id)
	if err := s.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, id); st != "running" {
		t.Errorf("after start: %s", st)
	}
	if _, err := s.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{CPUShares: 512}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.InspectContainer(ctx, id); c.HostConfig.CPUShares != 512 {
		t.Errorf("after update: cpu shares %d", c.HostConfig.CPUShares)
	}
	if err := s.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, id); st != "exited" {
		t.Errorf("after stop: %s", st)
	}
	same(t, s, fake, id)
	if err := s.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, id); st != "gone" {
		t.Errorf("after remove: %s", st)
	}
	if s.Len() != 0 {
		t.Errorf("%d left in the store", s.Len())
	}
}

func TestChangesBehindOurBackComeFromEvents(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	exits := create(t, s, "exits", "container")
	removed := create(t, s, "removed", "container")
	for _, id := range []string{exits, removed} {
		if err := s.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := fake.ExitContainer(exits, 137); err != nil { // an OOM kill, a crash
		t.Fatal(err)
	}
	eventually(t, "the exit", func() bool { return stateOf(t, s, exits) == "exited" })
	same(t, s, fake, exits)
	if c, _ := s.InspectContainer(ctx, exits); c.State.ExitCode != 137 {
		t.Errorf("exit code %d", c.State.ExitCode)
	}
	if err := fake.RemoveContainer(ctx, removed, container.RemoveOptions{Force: true}); err != nil { // docker rm -f
		t.Fatal(err)
	}
	eventually(t, "the removal", func() bool { return stateOf(t, s, removed) == "gone" })
	behind := create(t, fake, "made-by-another", "container") // another cri-dockerd, say
	eventually(t, "the new container", func() bool { return s.Len() == 2 })
	same(t, s, fake, behind)
}

func TestListsAnswerLikeDocker(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		id := create(t, s, n, "container")
		if n != "c" {
			if err := s.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	sb := create(t, s, "sb", "podsandbox")
	create(t, s, "foreign", "")
	for _, args := range []filters.Args{
		filters.NewArgs(filters.Arg("label", testLabel)),
		filters.NewArgs(filters.Arg("label", testLabel+"=container")),
		filters.NewArgs(filters.Arg("label", testLabel+"=container"), filters.Arg("label", "app=b")),
		filters.NewArgs(filters.Arg("label", testLabel), filters.Arg("id", sb[:10])),
		filters.NewArgs(filters.Arg("label", testLabel), filters.Arg("id", sb[5:20])), // Docker matches inside the ID
	} {
		opts := container.ListOptions{All: true, Filters: args}
		want, err := fake.ListContainers(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		hits := s.Hits()
		got, err := s.ListContainers(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if s.Hits() != hits+1 {
			t.Errorf("list %v went to Docker", args)
		}
		if !reflect.DeepEqual(comparable(got), comparable(want)) {
			t.Errorf("list %v:\nstore  %v\nDocker %v", args, comparable(got), comparable(want))
		}
	}
	// Lists the store cannot answer go to Docker.
	misses := s.Misses()
	if _, err := s.ListContainers(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "app=a"))}); err != nil || s.Misses() != misses+1 {
		t.Errorf("a list not limited to our containers: %v, misses %d -> %d", err, misses, s.Misses())
	}
}

// comparable keeps the fields of a list item that cri-dockerd reads, sorted by ID.
func comparable(list []container.Summary) []string {
	var out []string
	for _, c := range list {
		b, _ := json.Marshal(struct {
			ID, Image, ImageID, State string
			Names                     []string
			Labels                    map[string]string
			Created                   int64
		}{c.ID, c.Image, c.ImageID, c.State, c.Names, c.Labels, c.Created})
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

// While Docker's events are not followed (dockerd restarting), every read goes to Docker;
// once they are again, a relist brings in what changed meanwhile.
func TestABrokenEventStreamSendsReadsToDockerUntilARelist(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	kept := create(t, s, "kept", "container")
	if err := s.StartContainer(ctx, kept); err != nil {
		t.Fatal(err)
	}
	doomed := create(t, s, "doomed", "container")

	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	fake.InjectPersistentError("Events", away)
	fake.InjectPersistentError("Ping", away)
	fake.BreakEvents(errors.New("unexpected EOF"))
	eventually(t, "unsynced", func() bool { return !s.Synced() })
	// Changes while the store does not follow: an exit and a removal, no events to see.
	if err := fake.ExitContainer(kept, 2); err != nil {
		t.Fatal(err)
	}
	if err := fake.RemoveContainer(ctx, doomed, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	misses := s.Misses()
	if st := stateOf(t, s, kept); st != "exited" {
		t.Errorf("while unsynced: %s, want Docker's exited", st)
	}
	if s.Misses() == misses {
		t.Error("a read while unsynced was answered from memory")
	}
	fake.InjectPersistentError("Events", nil)
	fake.InjectPersistentError("Ping", nil)
	eventually(t, "synced again", s.Synced)
	same(t, s, fake, kept)
	if st := stateOf(t, s, doomed); st != "gone" {
		t.Errorf("removed while unsynced: %s after the relist", st)
	}
	if s.Len() != 1 {
		t.Errorf("%d tracked after the relist, want 1", s.Len())
	}
}

// Inspects by name or ID prefix follow Docker's rules (ambiguity included): they go to Docker.
func TestPrefixesAndNamesGoToDocker(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	id := create(t, s, "named", "container")
	misses := s.Misses()
	for _, ref := range []string{id[:12], "ctr-named"} {
		c, err := s.InspectContainer(context.Background(), ref)
		if err != nil || c.ID != id {
			t.Errorf("inspect %q: %v", ref, err)
		}
	}
	if s.Misses() != misses+2 {
		t.Errorf("misses %d -> %d, want 2 more", misses, s.Misses())
	}
}

// A reader may change what it got: the store's entry stays as Docker said.
func TestReadersGetTheirOwnCopy(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	id := create(t, s, "a", "container")
	c, _ := s.InspectContainer(context.Background(), id)
	c.Config.Labels["app"] = "changed"
	c.State.Status = "changed"
	same(t, s, fake, id)
}

// Our own removal of a container by prefix still leaves nothing in the store.
func TestRemovalByPrefix(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	id := create(t, s, "a", "container")
	if err := s.RemoveContainer(context.Background(), id[:12], container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, s, id); st != "gone" || s.Len() != 0 {
		t.Errorf("after removal by prefix: %s, %d tracked", st, s.Len())
	}
}

// The list generation moves with every change a list shows (a new container, a state, a
// removal, behind our back too, and a sync lost) and with nothing else: an inspect after an
// event that changed no list item, a refresh, leaves it.
func TestListGenerationMovesWithWhatListsShow(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	gen := func() uint64 {
		g, synced := s.ListGeneration()
		if !synced {
			t.Fatal("ListGeneration: not synced")
		}
		return g
	}
	moves := func(what string, change func()) {
		t.Helper()
		before := gen()
		change()
		eventually(t, what+" moving the list generation", func() bool { return gen() != before })
	}
	var id string
	moves("a create", func() { id = create(t, s, "a", "container") })
	moves("a start", func() {
		if err := s.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	moves("an exit behind our back", func() {
		if err := fake.ExitContainer(id, 1); err != nil {
			t.Fatal(err)
		}
	})
	still := gen()
	if err := s.Refresh(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateContainer(ctx, id, container.UpdateConfig{}); err != nil {
		t.Fatal(err)
	}
	if g := gen(); g != still {
		t.Errorf("list generation %d after inspects that changed no list item, want %d", g, still)
	}
	moves("a removal behind our back", func() {
		if err := fake.RemoveContainer(ctx, id, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	})
	before := gen()
	fake.InjectPersistentError("Events", errors.New("unexpected EOF"))
	fake.BreakEvents(errors.New("unexpected EOF"))
	eventually(t, "unsynced", func() bool { return !s.Synced() })
	if g, synced := s.ListGeneration(); synced || g == before {
		t.Errorf("after the stream broke: generation %d (was %d), synced %v", g, before, synced)
	}
	fake.InjectPersistentError("Events", nil)
	eventually(t, "synced again", s.Synced)
}

// Image inspects by name or ID are answered from memory until an image event (here a removal
// behind our back) or our own pull or removal changes what a name resolves to.
func TestImageInspectsAreKeptUntilImagesChange(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	inspects := func() int { return fake.Calls("InspectImage") }
	first, err := s.InspectImage(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	before := inspects()
	again, err := s.InspectImage(ctx, testImage)
	if err != nil || again.ID != first.ID || inspects() != before {
		t.Fatalf("second inspect by name: %v, %d Docker calls, want the first's answer and none", err, inspects()-before)
	}
	again.RepoTags[0] = "changed by a reader"
	if mine, _ := s.InspectImage(ctx, testImage); mine.RepoTags[0] != testImage {
		t.Errorf("a reader's change reached the cache: %v", mine.RepoTags)
	}

	if _, err := fake.RemoveImage(ctx, testImage, image.RemoveOptions{}); err != nil { // behind our back
		t.Fatal(err)
	}
	eventually(t, "the removal read", func() bool {
		_, err := s.InspectImage(ctx, testImage)
		return libdocker.IsNotFound(err)
	})

	// Our own pull of a newer image of the name, and our removal: the next inspect sees each
	// at once, whenever its event comes.
	fake.AddPullable(testImage, libdocker.FakeImage("", "", testImage))
	if err := s.PullImage(ctx, testImage, registry.AuthConfig{}, 0); err != nil {
		t.Fatal(err)
	}
	old, err := s.InspectImage(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	newer := libdocker.FakeImage("", "", testImage)
	fake.AddPullable(testImage, newer)
	if err := s.PullImage(ctx, testImage, registry.AuthConfig{}, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.InspectImage(ctx, testImage); err != nil || got.ID != newer.ID {
		t.Errorf("inspect right after our pull: %v, %+v, want the newer %s (the older was %s)", err, got, newer.ID, old.ID)
	}
	if _, err := s.RemoveImage(ctx, testImage, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InspectImage(ctx, testImage); !libdocker.IsNotFound(err) {
		t.Errorf("inspect right after our removal: %v, want NotFound", err)
	}
}

// Docker's version is asked once per connection of the event stream: a restart of dockerd (an
// upgrade, here) ends the stream, and the version is asked again after the relist.
func TestVersionIsAskedOncePerDockerd(t *testing.T) {
	fake := newFake()
	s := started(t, fake)
	ctx := context.Background()
	first, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.Calls("Version")
	if again, err := s.Version(ctx); err != nil || again.Version != first.Version || fake.Calls("Version") != calls {
		t.Fatalf("second Version: %v, %q, %d Docker calls, want %q from memory", err, again.Version, fake.Calls("Version")-calls, first.Version)
	}
	fake.SetAPIVersion("1.51") // the upgraded dockerd
	fake.BreakEvents(errors.New("unexpected EOF"))
	eventually(t, "synced again after the restart", func() bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.synced && s.conn == 2
	})
	upgraded, err := s.Version(ctx)
	if err != nil || upgraded.Version == first.Version || upgraded.APIVersion != "1.51" {
		t.Errorf("Version after the restart: %v, %q API %s, want the upgraded engine's (was %q)", err, upgraded.Version, upgraded.APIVersion, first.Version)
	}
}
