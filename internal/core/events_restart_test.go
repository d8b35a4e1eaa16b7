package core

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// While dockerd is down the watcher pings it instead of resubscribing and relisting on a
// growing backoff, and it follows Docker's events again as soon as Docker answers: with the
// backoff (0.1 s doubling, 5 s at most) the reconnect came up to 5 s after dockerd was back,
// 3.1 s after this test's outage.
func TestContainerEventsReconnectAsSoonAsDockerAnswersAgain(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "reconnect", "")
	id := createContainer(t, s, podID, podCfg, "c")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	st, _, _ := openEvents(t, s)

	// dockerd stops: the stream breaks, then nothing answers.
	down := libdocker.ConnectionFailed("unix:///var/run/docker.sock")
	for _, m := range []string{"Events", "ListContainers", "InspectContainer", "Ping"} {
		fake.InjectPersistentError(m, down)
	}
	fake.BreakEvents(errors.New("unexpected EOF"))
	time.Sleep(500 * time.Millisecond)
	lists := fake.Calls("ListContainers")
	time.Sleep(2700 * time.Millisecond)
	if n := fake.Calls("ListContainers") - lists; n > 0 {
		t.Errorf("%d relists while Docker was down, want none (it pings until Docker answers)", n)
	}
	if fake.Calls("Ping") < 5 {
		t.Errorf("%d pings in 3.2 s while Docker was down, want one every 100 ms", fake.Calls("Ping"))
	}

	for _, m := range []string{"Events", "ListContainers", "InspectContainer", "Ping"} {
		fake.InjectPersistentError(m, nil)
	}
	up := time.Now()
	for fake.EventSubscribers() == 0 {
		if time.Since(up) > 5*time.Second {
			t.Fatal("not following Docker's events 5 s after Docker answered again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(up); took > time.Second {
		t.Errorf("following Docker's events again %v after Docker answered, want within 1 s", took)
	}
	// And events flow.
	if err := fake.ExitContainer(id, 137); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, st, id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
}
