package core

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// For the kubelet's Evented PLEG, PodSandboxStatus carries the statuses of all the pod's
// containers, as ContainerStatus gives them, and the time they were read from (not after the
// call): also for a sandbox removed behind our back whose containers are left.
func TestPodSandboxStatusCarriesItsContainersAndATimestamp(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	id, cfg := runPod(t, s, "a", "")
	running := startedContainer(t, s, id, cfg, "app")
	exited := startedContainer(t, s, id, cfg, "done")
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: exited}); err != nil {
		t.Fatal(err)
	}
	otherPod, otherCfg := runPod(t, s, "b", "")
	startedContainer(t, s, otherPod, otherCfg, "elsewhere")

	check := func(when string, want ...string) {
		t.Helper()
		before := time.Now().UnixNano()
		resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Timestamp < before || resp.Timestamp > time.Now().UnixNano() {
			t.Errorf("%s: timestamp %d, not taken during the call (from %d)", when, resp.Timestamp, before)
		}
		got := map[string]*runtimeapi.ContainerStatus{}
		for _, st := range resp.ContainersStatuses {
			got[st.Id] = st
		}
		if len(got) != len(want) {
			t.Fatalf("%s: statuses of %d containers, want %d (%v)", when, len(got), len(want), want)
		}
		for _, cid := range want {
			direct, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got[cid], direct.Status) {
				t.Errorf("%s: container %.12s: %v, want ContainerStatus's %v", when, cid, got[cid], direct.Status)
			}
		}
	}
	check("running", running, exited)
	removeBehindOurBack(t, fake, id)
	check("sandbox removed behind our back", running, exited)
}
