package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// eventStream is the server side of one GetContainerEvents call, as a test sees it.
type eventStream struct {
	grpc.ServerStream
	ctx    context.Context
	header chan struct{}
	events chan *runtimeapi.ContainerEventResponse
	block  chan struct{} // when set, Send waits on it
}

func (s *eventStream) Context() context.Context { return s.ctx }
func (s *eventStream) SendHeader(metadata.MD) error {
	close(s.header)
	return nil
}
func (s *eventStream) Send(ev *runtimeapi.ContainerEventResponse) error {
	if s.block != nil {
		<-s.block
	}
	select {
	case s.events <- ev:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// openEvents starts GetContainerEvents and waits until it follows Docker's events.
func openEvents(t *testing.T, s *Service) (*eventStream, <-chan error, context.CancelFunc) {
	t.Helper()
	caughtUp(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	st := &eventStream{ctx: ctx, header: make(chan struct{}), events: make(chan *runtimeapi.ContainerEventResponse, 100)}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
	select {
	case <-st.header:
	case err := <-done:
		t.Fatalf("GetContainerEvents ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("GetContainerEvents did not start following Docker's events")
	}
	t.Cleanup(cancel)
	return st, done, cancel
}

// caughtUp waits (bounded) until the watcher, which follows Docker's events from the service's
// start, has handled the events of what exists now: a stream opened before would get the late
// ones as changes it missed (the kubelet would just relist; the tests count events exactly).
func caughtUp(t *testing.T, s *Service) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 2*time.Millisecond, func() bool {
		list, err := s.docker.ListContainers(context.Background(), container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel)})
		if err != nil {
			t.Fatal(err)
		}
		s.events.mu.Lock()
		done := len(s.events.known) == len(list)
		for _, c := range list {
			if k, ok := s.events.known[c.ID]; !ok || k.state != containerState(c.State) {
				done = false
			}
		}
		s.events.mu.Unlock()
		return done
	}, "the event watcher has not caught up with Docker within 5 s")
}

// nextEvent waits for the next event and checks its container and type.
func nextEvent(t *testing.T, st *eventStream, id string, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	t.Helper()
	select {
	case ev := <-st.events:
		if ev.ContainerId != id || ev.ContainerEventType != typ {
			t.Fatalf("event %v for %.12s, want %v for %.12s", ev.ContainerEventType, ev.ContainerId, typ, id)
		}
		if ev.CreatedAt == 0 {
			t.Errorf("event without a time")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event for %.12s", typ, id)
	}
	return nil
}

func noMoreEvents(t *testing.T, st *eventStream) {
	t.Helper()
	select {
	case ev := <-st.events:
		t.Errorf("unexpected event %v for %.12s", ev.ContainerEventType, ev.ContainerId)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestContainerEventsCarryThePodsStatuses(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	st, _, _ := openEvents(t, s)

	podID, podCfg := runPod(t, s, "ev", "")
	nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	ev := nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if ev.PodSandboxStatus.GetId() != podID || ev.PodSandboxStatus.Metadata.GetUid() != "uid-ev" || ev.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox status %v", ev.PodSandboxStatus)
	}
	created := ev.PodSandboxStatus.GetCreatedAt()

	id := createContainer(t, s, podID, podCfg, "c")
	ev = nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	if len(ev.ContainersStatuses) != 1 || ev.ContainersStatuses[0].Id != id || ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("container statuses %v", ev.ContainersStatuses)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after start: %v", ev.ContainersStatuses[0].State)
	}
	if err := fake.ExitContainer(id, 3); err != nil { // a crash, not a CRI call
		t.Fatal(err)
	}
	ev = nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if ev.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_EXITED || ev.ContainersStatuses[0].ExitCode != 3 {
		t.Errorf("after exit: %v", ev.ContainersStatuses[0])
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if len(ev.ContainersStatuses) != 0 || ev.PodSandboxStatus.GetId() != podID {
		t.Errorf("after removal: sandbox %v containers %v", ev.PodSandboxStatus, ev.ContainersStatuses)
	}

	// The sandbox's deletion carries its last status, not ready: the kubelet drops the pod on it.
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if ev.PodSandboxStatus.GetId() != podID || ev.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || ev.PodSandboxStatus.Metadata.GetName() != "ev" {
		t.Errorf("deleted sandbox status %v", ev.PodSandboxStatus)
	}
	if got := ev.PodSandboxStatus.GetCreatedAt(); got != created {
		t.Errorf("deleted sandbox created_at %d, want the last status's %d", got, created)
	}
	noMoreEvents(t, st)
}

// A sandbox removed behind our back with nothing left, of which no event was seen before,
// is reported deleted with the status its Docker labels (the event's attributes) tell: the
// kubelet needs the pod's identity to drop it.
func TestSandboxDeletedBeforeAnyEventCarriesItsStatus(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	podID, _ := runPod(t, s, "ev", "")
	st, _, _ := openEvents(t, s)
	removeBehindOurBack(t, fake, podID)
	nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	ev := nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if ps := ev.PodSandboxStatus; ps.GetId() != podID || ps.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || ps.GetMetadata().GetUid() != "uid-ev" || ps.GetLabels()["app"] != "ev" {
		t.Errorf("deleted sandbox status %v, want %s NOTREADY with its metadata and labels", ps, podID)
	}
}

// A sandbox's last status is kept while no stream is open: a stream opened later reports the
// sandbox's deletion with it (its creation time included), not only with what its labels say.
func TestSandboxStatusIsKeptWhileNoStreamIsOpen(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	st, done, cancel := openEvents(t, s)
	podID, _ := runPod(t, s, "kept", "")
	nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	created := nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT).PodSandboxStatus.GetCreatedAt()
	cancel()
	<-done
	for s.events.subscribers() != 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	st2, _, _ := openEvents(t, s) // once the watcher has seen the stop
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, st2, podID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if got := ev.PodSandboxStatus.GetCreatedAt(); created == 0 || got != created {
		t.Errorf("deleted sandbox created_at %d, want the last status's %d", got, created)
	}
}

func TestContainerEventsAfterDockerRestartReportWhatWasMissed(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "restart", "")
	running := createContainer(t, s, podID, podCfg, "running")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: running}); err != nil {
		t.Fatal(err)
	}
	doomed := createContainer(t, s, podID, podCfg, "doomed")
	st, _, _ := openEvents(t, s)
	noMoreEvents(t, st) // what existed before is state, not events

	// dockerd goes away; while it is away (Events fails), containers change.
	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	fake.InjectPersistentError("Events", away)
	fake.InjectPersistentError("ListContainers", away)
	fake.BreakEvents(errors.New("unexpected EOF"))
	if err := fake.ExitContainer(running, 137); err != nil {
		t.Fatal(err)
	}
	if err := fake.RemoveContainer(ctx, doomed, containerRemoveOptions()); err != nil {
		t.Fatal(err)
	}
	born := createContainer(t, s, podID, podCfg, "born")
	if err := fake.StartContainer(ctx, born); err != nil {
		t.Fatal(err)
	}
	noMoreEvents(t, st)
	fake.InjectPersistentError("ListContainers", nil)
	fake.InjectPersistentError("Events", nil)

	got := map[string][]runtimeapi.ContainerEventType{}
	for range 4 {
		select {
		case ev := <-st.events:
			got[ev.ContainerId] = append(got[ev.ContainerId], ev.ContainerEventType)
		case <-time.After(10 * time.Second):
			t.Fatalf("events after reconnect: %v", got)
		}
	}
	want := map[string][]runtimeapi.ContainerEventType{
		running: {runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT},
		doomed:  {runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT},
		born:    {runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events from the relist %v, want %v", got, want)
	}
	// And the stream goes on.
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: born}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, st, born, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	noMoreEvents(t, st)
}

// The relist after a Docker restart reports a pod that went away container first, sandbox
// last, and a pod that came sandbox first: the kubelet never sees a container without its pod.
func TestContainerEventsAfterDockerRestartKeepPodsAndContainersInOrder(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	gonePod, gonePodCfg := runPod(t, s, "gone", "")
	goneCtr := createContainer(t, s, gonePod, gonePodCfg, "c")
	st, _, _ := openEvents(t, s)

	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	fake.InjectPersistentError("Events", away)
	fake.InjectPersistentError("ListContainers", away)
	fake.BreakEvents(errors.New("unexpected EOF"))
	for _, id := range []string{goneCtr, gonePod} {
		if err := fake.RemoveContainer(ctx, id, containerRemoveOptions()); err != nil {
			t.Fatal(err)
		}
	}
	newPod, newPodCfg := runPod(t, s, "new", "")
	newCtr := createContainer(t, s, newPod, newPodCfg, "c")
	noMoreEvents(t, st)
	fake.InjectPersistentError("ListContainers", nil)
	fake.InjectPersistentError("Events", nil)

	at := map[string]int{}
	for i := range 5 {
		select {
		case ev := <-st.events:
			at[fmt.Sprintf("%.12s %v", ev.ContainerId, ev.ContainerEventType)] = i
		case <-time.After(10 * time.Second):
			t.Fatalf("events after reconnect: %v", at)
		}
	}
	key := func(id string, typ runtimeapi.ContainerEventType) int {
		i, ok := at[fmt.Sprintf("%.12s %v", id, typ)]
		if !ok {
			t.Fatalf("no %v event for %.12s in %v", typ, id, at)
		}
		return i
	}
	if key(goneCtr, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT) > key(gonePod, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT) {
		t.Errorf("the sandbox's deletion came before its container's: %v", at)
	}
	if key(newPod, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT) > key(newCtr, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT) {
		t.Errorf("the container's creation came before its sandbox's: %v", at)
	}
}

// startingDocker starts a container when the next list begins, as a kubelet's start racing
// with the relist after a reconnect does: the list sees it running, and its start event
// comes on the new stream.
type startingDocker struct {
	*libdocker.Fake
	mu    sync.Mutex
	start string
}

func (d *startingDocker) ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	d.mu.Lock()
	id := d.start
	d.start = ""
	d.mu.Unlock()
	if id != "" {
		if err := d.Fake.StartContainer(ctx, id); err != nil {
			return nil, err
		}
	}
	return d.Fake.ListContainers(ctx, opts)
}

// A start that both the relist and the new event stream see is reported once.
func TestContainerEventSeenByTheRelistIsNotSentAgain(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	fake.SetDockerRootDir(t.TempDir())
	fake.AddImage(libdocker.FakeImage("", "", testPauseImage))
	fake.AddImage(libdocker.FakeImage("", "", testImage))
	d := &startingDocker{Fake: fake}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	s, err := New(context.Background(), d, Options{PodInfraImage: testPauseImage, DefaultRuntimeHandler: "docker", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	podID, podCfg := runPod(t, s, "race", "")
	id := createContainer(t, s, podID, podCfg, "c")
	st, _, _ := openEvents(t, s)
	d.mu.Lock()
	d.start = id
	d.mu.Unlock()
	fake.BreakEvents(errors.New("unexpected EOF"))
	nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	noMoreEvents(t, st)
}

// dockerd sends die events while it shuts down, when it may no longer answer the inspects an
// event's statuses come from. Such an event is not sent half empty (the kubelet takes an event's
// statuses as the pod's whole state: it would believe the pod lost its containers); the relist
// after the reconnect sends it with the statuses.
func TestContainerEventsDockerCannotDescribeAreSentByTheRelist(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "going", "")
	running := createContainer(t, s, podID, podCfg, "running")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: running}); err != nil {
		t.Fatal(err)
	}
	doomed := createContainer(t, s, podID, podCfg, "doomed")
	st, _, _ := openEvents(t, s)

	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?")
	fake.InjectPersistentError("InspectContainer", away)
	fake.InjectPersistentError("ListContainers", away)
	if err := fake.ExitContainer(running, 137); err != nil { // its die event comes, its statuses cannot
		t.Fatal(err)
	}
	if err := fake.RemoveContainer(ctx, doomed, containerRemoveOptions()); err != nil {
		t.Fatal(err)
	}
	noMoreEvents(t, st)
	fake.InjectPersistentError("InspectContainer", nil)
	fake.InjectPersistentError("ListContainers", nil)

	got := map[string]*runtimeapi.ContainerEventResponse{}
	for range 2 {
		select {
		case ev := <-st.events:
			got[ev.ContainerId] = ev
		case <-time.After(10 * time.Second):
			t.Fatalf("events after Docker answered again: %v", got)
		}
	}
	if ev := got[running]; ev.GetContainerEventType() != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
		t.Errorf("event of the container that exited: %v", ev)
	} else if ev.PodSandboxStatus.GetId() != podID || ev.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_READY ||
		len(ev.ContainersStatuses) != 1 || ev.ContainersStatuses[0].Id != running || ev.ContainersStatuses[0].ExitCode != 137 {
		t.Errorf("stopped event: sandbox %v, containers %v", ev.PodSandboxStatus, ev.ContainersStatuses)
	}
	if ev := got[doomed]; ev.GetContainerEventType() != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		t.Errorf("event of the removed container: %v", ev)
	} else if ev.PodSandboxStatus.GetId() != podID || len(ev.ContainersStatuses) != 1 {
		t.Errorf("deleted event: sandbox %v, containers %v", ev.PodSandboxStatus, ev.ContainersStatuses)
	}
	noMoreEvents(t, st)
	// And the stream goes on.
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: running}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, st, running, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
}

func TestSlowEventStreamIsEndedAndOthersGoOn(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	s.events.buffer = 2 // for the slow stream only
	slow, slowDone, _ := openEvents(t, s)
	slow.block = make(chan struct{}) // never reads
	s.events.mu.Lock()
	s.events.buffer = eventBuffer
	s.events.mu.Unlock()
	fast, _, _ := openEvents(t, s)
	podID, podCfg := runPod(t, s, "slow", "")
	for i := range 3 {
		createContainer(t, s, podID, podCfg, fmt.Sprintf("c%d", i))
	}
	for range 5 { // sandbox created, started, three containers created: the others go on
		select {
		case <-fast.events:
		case <-time.After(5 * time.Second):
			t.Fatal("the other stream stopped getting events")
		}
	}
	// The slow client reads again: it gets what was buffered, then the end of its stream.
	close(slow.block)
	select {
	case err := <-slowDone:
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("slow stream ended with %v, want ResourceExhausted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("slow stream was not ended")
	}
	if n := len(slow.events); n != 3 {
		t.Errorf("the slow stream got %d events, want its buffer (2) and the one it was sending", n)
	}
}

func TestContainerEventsEndOnClose(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	_, done, _ := openEvents(t, s)
	s.Close()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("stream ended with %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after Close")
	}
	if !testutil.PollUntil(5*time.Second, 10*time.Millisecond, func() bool { return fake.EventSubscribers() == 0 }) {
		t.Fatalf("%d Docker event subscriptions left open", fake.EventSubscribers())
	}
}

func containerRemoveOptions() container.RemoveOptions { return container.RemoveOptions{Force: true} }

// A pod removed while Docker could not describe it (its destroy events unsent): the relist
// after Docker answers again sends the container's deletion before its sandbox's, as it does
// for deletions it saw itself.
func TestUnsentDeletionsOfAPodComeContainerFirst(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "vanishing", "")
	ctr := createContainer(t, s, podID, podCfg, "c")
	st, _, _ := openEvents(t, s)

	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?")
	fake.InjectPersistentError("InspectContainer", away)
	fake.InjectPersistentError("ListContainers", away)
	for _, id := range []string{ctr, podID} {
		if err := fake.RemoveContainer(ctx, id, containerRemoveOptions()); err != nil {
			t.Fatal(err)
		}
	}
	noMoreEvents(t, st)
	fake.InjectPersistentError("InspectContainer", nil)
	fake.InjectPersistentError("ListContainers", nil)
	nextEvent(t, st, ctr, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	nextEvent(t, st, podID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	noMoreEvents(t, st)
}

// With the container store in front of Docker, as cri-dockerd serves: the events come from the
// store, their statuses from its memory brought up to each event (an exit behind our back
// carries its exit code), and after Docker's stream came back, the store's relist reports what
// was missed.
func TestContainerEventsFromTheContainerStore(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s, st := newStoreService(t, fake)
	t.Cleanup(s.Close)
	ctx := context.Background()
	ev, _, _ := openEvents(t, s)
	podID, podCfg := runPod(t, s, "stored", "")
	nextEvent(t, ev, podID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	nextEvent(t, ev, podID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	id := createContainer(t, s, podID, podCfg, "c")
	nextEvent(t, ev, id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ev, id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if err := fake.ExitContainer(id, 3); err != nil {
		t.Fatal(err)
	}
	got := nextEvent(t, ev, id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if len(got.ContainersStatuses) != 1 || got.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_EXITED || got.ContainersStatuses[0].ExitCode != 3 {
		t.Errorf("after exit: %v", got.ContainersStatuses)
	}
	if hits := st.Hits(); hits == 0 {
		t.Error("no read came from the store's memory")
	}
	// Docker goes away; meanwhile the container is removed and another one starts.
	away := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	fake.InjectPersistentError("Events", away)
	fake.InjectPersistentError("Ping", away)
	fake.BreakEvents(errors.New("unexpected EOF"))
	for st.Synced() {
		time.Sleep(time.Millisecond)
	}
	if err := fake.RemoveContainer(ctx, id, containerRemoveOptions()); err != nil {
		t.Fatal(err)
	}
	born := createContainer(t, s, podID, podCfg, "born")
	if err := fake.StartContainer(ctx, born); err != nil {
		t.Fatal(err)
	}
	noMoreEvents(t, ev)
	fake.InjectPersistentError("Events", nil)
	fake.InjectPersistentError("Ping", nil)
	seen := map[string][]runtimeapi.ContainerEventType{}
	for range 3 {
		select {
		case e := <-ev.events:
			seen[e.ContainerId] = append(seen[e.ContainerId], e.ContainerEventType)
			if e.ContainerId == born && e.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT &&
				(len(e.ContainersStatuses) != 1 || e.ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING) {
				t.Errorf("started event's statuses %v", e.ContainersStatuses)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("events after reconnect: %v", seen)
		}
	}
	want := map[string][]runtimeapi.ContainerEventType{
		id:   {runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT},
		born: {runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("events from the store's relist %v, want %v", seen, want)
	}
	noMoreEvents(t, ev)
	if n := fake.EventSubscribers(); n != 2 {
		t.Errorf("%d subscriptions to Docker's events, want the store's two (containers, images)", n)
	}
}
