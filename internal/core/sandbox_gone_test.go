package core

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// removeBehindOurBack is `docker rm -f` of a container, past the service.
func removeBehindOurBack(t *testing.T, fake *libdocker.Fake, id string) {
	t.Helper()
	if err := fake.RemoveContainer(context.Background(), id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

func listSandboxes(t *testing.T, s *Service, f *runtimeapi.PodSandboxFilter) map[string]*runtimeapi.PodSandbox {
	t.Helper()
	resp, err := s.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: f})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range resp.Items {
		out[sb.Id] = sb
	}
	return out
}

func running(t *testing.T, fake *libdocker.Fake, id string) bool {
	t.Helper()
	c, err := fake.InspectContainer(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return c.State.Running
}

func TestSandboxRemovedBehindOurBackIsNotReadyUntilRemoved(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("runsc", "/usr/local/bin/runsc")
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	id, cfg := runPod(t, s, "a", "runsc")
	before := sandboxStatus(t, s, id)
	cid := startedContainer(t, s, id, cfg, "app")
	other, _ := runPod(t, s, "b", "")
	removeBehindOurBack(t, fake, id)

	// crictl rmp asks the status first, by the prefix the user typed.
	for _, ref := range []string{id, id[:12]} {
		st := sandboxStatus(t, s, ref)
		if st.Id != id || st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Fatalf("status(%s) = %s %v, want %s NOTREADY", ref, st.Id, st.State, id)
		}
		if st.Metadata.String() != before.Metadata.String() || st.CreatedAt != before.CreatedAt || st.RuntimeHandler != "runsc" ||
			st.Labels["app"] != "a" || st.Annotations["note"] != "x" {
			t.Errorf("status of the removed sandbox = %v, want what it was: %v", st, before)
		}
	}
	list := listSandboxes(t, s, nil)
	if sb := list[id]; sb == nil || sb.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || sb.Metadata.Attempt != 1 || sb.Labels["app"] != "a" || sb.RuntimeHandler != "runsc" {
		t.Fatalf("ListPodSandbox has %v for the removed sandbox, want it NOTREADY with its metadata", sb)
	}
	if list[other] == nil || len(list) != 2 {
		t.Errorf("ListPodSandbox = %v, want both pods", list)
	}
	if got := listSandboxes(t, s, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}); got[id] != nil {
		t.Errorf("a READY filter lists the removed sandbox")
	}
	if got := listSandboxes(t, s, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "a"}}); got[id] == nil || len(got) != 1 {
		t.Errorf("selector app=a lists %v, want the removed sandbox alone", got)
	}
	if got := listSandboxes(t, s, &runtimeapi.PodSandboxFilter{Id: other[:8]}); got[id] != nil {
		t.Errorf("an id filter of another pod lists the removed sandbox")
	}

	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id[:12]}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if running(t, fake, cid) {
		t.Errorf("the pod's container still runs after StopPodSandbox")
	}
	for i := 0; i < 2; i++ {
		if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("RemovePodSandbox %d: %v", i+1, err)
		}
	}
	if _, err := fake.InspectContainer(ctx, cid); !libdocker.IsNotFound(err) {
		t.Errorf("the pod's container is still there after RemovePodSandbox: %v", err)
	}
	_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	if got := listSandboxes(t, s, nil); got[id] != nil || len(got) != 1 {
		t.Errorf("ListPodSandbox after the removal = %v, want the other pod alone", got)
	}
	if n := s.PodsByHandler()["runsc"]; n != 0 {
		t.Errorf("%d pods counted on runsc after the removal", n)
	}
}

func TestRemovePodSandboxOfARemovedSandboxWithoutStopRemovesItsRunningContainers(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, cfg := runPod(t, s, "a", "")
	cid := startedContainer(t, s, id, cfg, "app")
	removeBehindOurBack(t, fake, id)
	// crictl rmp of a NOTREADY sandbox calls RemovePodSandbox with no stop first.
	if _, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id[:12]}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.InspectContainer(context.Background(), cid); !libdocker.IsNotFound(err) {
		t.Errorf("the pod's container is still there: %v", err)
	}
	_, err := s.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
}

func TestRemovedSandboxOfTheNetworkPluginKeepsItsIPsUntilRemoved(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	ctx := context.Background()
	id, _ := runPod(t, s, "a", "")
	removeBehindOurBack(t, fake, id)

	// The checkpoint alone keeps it listed, with its IPs.
	st := sandboxStatus(t, s, id)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Network.Ip != "10.88.0.1" || len(st.Network.AdditionalIps) != 1 || st.Metadata.Name != "a" {
		t.Fatalf("status of the removed sandbox = %v, want NOTREADY with 10.88.0.1", st)
	}
	if got := listSandboxes(t, s, nil); got[id] == nil {
		t.Fatalf("ListPodSandbox does not list the removed sandbox")
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 || tearDowns[0].netns != "/pins/"+id {
		t.Errorf("tear downs = %+v, want one in the pinned namespace", tearDowns)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
	if n := s.pins.(*fakePins).count(); n != 0 {
		t.Errorf("%d namespaces still pinned", n)
	}
	_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	if got := listSandboxes(t, s, nil); len(got) != 0 {
		t.Errorf("ListPodSandbox after the removal = %v", got)
	}
}

func TestRemovedSandboxAfterARestartIsReportedFromItsContainers(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, cfg := runPod(t, s, "a", "")
	ccfg := containerConfig("app")
	ccfg.Labels["io.kubernetes.pod.name"] = "a"
	ccfg.Labels["io.kubernetes.pod.namespace"] = "ns"
	ccfg.Labels["io.kubernetes.pod.uid"] = "uid-a"
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: ccfg, SandboxConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	created := sandboxStatus(t, s, id).CreatedAt
	removeBehindOurBack(t, fake, id)

	s2 := newTestService(t, fake, Options{})
	st := sandboxStatus(t, s2, id[:12])
	want := map[string]string{"io.kubernetes.pod.name": "a", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "uid-a"}
	// Its creation time is its oldest container's (Docker lists seconds), in nanoseconds.
	if d := created - st.CreatedAt; d < -int64(time.Second) || d >= int64(time.Second) {
		t.Errorf("created_at %d after a restart, want %d to the second", st.CreatedAt, created)
	}
	if st.Id != id || st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Metadata.Name != "a" || st.Metadata.Namespace != "ns" || st.Metadata.Uid != "uid-a" || st.CreatedAt == 0 {
		t.Fatalf("status after a restart = %v, want it NOTREADY with the pod's name, namespace, uid and a creation time", st)
	}
	if len(st.Labels) != len(want) || st.Labels["io.kubernetes.pod.uid"] != "uid-a" || st.Labels["io.kubernetes.pod.name"] != "a" {
		t.Errorf("labels = %v, want the pod's labels %v", st.Labels, want)
	}
	// The kubelet finds a pod's sandboxes by its uid label.
	if got := listSandboxes(t, s2, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": "uid-a"}}); got[id] == nil {
		t.Errorf("ListPodSandbox by the pod's uid label does not list the removed sandbox")
	}
	if _, err := s2.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.InspectContainer(context.Background(), resp.ContainerId); !libdocker.IsNotFound(err) {
		t.Errorf("the pod's container is still there: %v", err)
	}
}

func TestSandboxRemovedWithNothingLeftIsNotFound(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, _ := runPod(t, s, "a", "")
	removeBehindOurBack(t, fake, id)
	_, err := s.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	if got := listSandboxes(t, s, nil); len(got) != 0 {
		t.Errorf("ListPodSandbox = %v, want nothing", got)
	}
	// The index forgets it too: it counts no pod for the metrics.
	if n := s.PodsByHandler()[""]; n != 0 {
		t.Errorf("%d pods counted after the sandbox left nothing", n)
	}
}

func TestSandboxRemovedBeforeAnyStatusIsReportedAsItWasRun(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, cfg := runPod(t, s, "a", "")
	createContainer(t, s, id, cfg, "app")
	removeBehindOurBack(t, fake, id)
	st := sandboxStatus(t, s, id)
	if st.Metadata.String() != cfg.Metadata.String() || st.Labels["app"] != "a" || st.Annotations["note"] != "x" || st.CreatedAt == 0 {
		t.Errorf("status = %v, want the metadata, labels and annotations it was run with", st)
	}
	if got := listSandboxes(t, s, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "a"}}); got[id] == nil {
		t.Errorf("ListPodSandbox by the pod's label does not list it")
	}
}

func TestRestartKeepsTheNetworkOfARemovedSandboxWithContainersUntilItsStop(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	id, cfg := runPod(t, s, "a", "")
	createContainer(t, s, id, cfg, "app")
	gone, _ := runPod(t, s, "b", "")
	removeBehindOurBack(t, fake, id)
	removeBehindOurBack(t, fake, gone)

	// At the start, the network of the sandbox that left nothing else is torn down; the
	// other one is still listed with its IP, for the kubelet to stop.
	s2 := newNetService(t, fake, net, root)
	if _, tearDowns := net.calls(); len(tearDowns) != 1 || tearDowns[0].sandboxID != gone {
		t.Fatalf("tear downs at the start = %+v, want the one of %s alone", tearDowns, gone)
	}
	if st := sandboxStatus(t, s2, id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Network.Ip != "10.88.0.1" || st.Metadata.Name != "a" {
		t.Errorf("status after a restart = %v, want NOTREADY with 10.88.0.1", st)
	}
	if _, err := s2.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 2 || tearDowns[1].sandboxID != id {
		t.Errorf("tear downs = %+v, want a second one for %s", tearDowns, id)
	}
	if _, err := s2.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
}

// A sandbox known from the list at our start, then removed behind our back, keeps its
// creation time (Docker lists seconds).
func TestSandboxRemovedAfterARestartKeepsItsCreationTime(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	id, cfg := runPod(t, s, "a", "")
	createContainer(t, s, id, cfg, "app")
	created := sandboxStatus(t, s, id).CreatedAt
	s2 := newTestService(t, fake, Options{})
	removeBehindOurBack(t, fake, id)
	st := sandboxStatus(t, s2, id)
	if d := created - st.CreatedAt; d < 0 || d >= int64(time.Second) {
		t.Errorf("created_at %d after the removal, want %d to the second", st.CreatedAt, created)
	}
}

// A removed sandbox whose network could not be torn down at a restart is still reported from
// its checkpoint alone: the pod's name, namespace and uid, and when it was checkpointed.
func TestRemovedSandboxAfterARestartIsReportedFromItsCheckpoint(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &fakeNet{}
	s := newNetService(t, fake, net, root)
	id, _ := runPod(t, s, "a", "")
	created := sandboxStatus(t, s, id).CreatedAt
	removeBehindOurBack(t, fake, id)
	net.mu.Lock()
	net.tearDownErr = errors.New("CNI DEL: plugin failed")
	net.mu.Unlock()
	s2 := newNetService(t, fake, net, root) // its start cannot tear the network down
	if files := checkpointFiles(t, root); len(files) != 1 {
		t.Fatalf("checkpoints %v, want the sandbox's", files)
	}
	st := sandboxStatus(t, s2, id)
	if m := st.Metadata; m.GetName() != "a" || m.GetNamespace() != "ns" || m.GetUid() != "uid-a" {
		t.Errorf("metadata %v, want the checkpoint's pod", m)
	}
	if d := st.CreatedAt - created; d <= -int64(time.Second) || d >= int64(time.Second) {
		t.Errorf("created_at %d, want the checkpoint's time, written with the sandbox at %d", st.CreatedAt, created)
	}
}

// A removed sandbox known from both its checkpoint and a container is reported created at the
// earlier of the two times: the checkpoint's, or its oldest container's (Docker lists seconds).
func TestRemovedSandboxIsReportedCreatedAtTheEarliestKnownTime(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &fakeNet{}
	s := newNetService(t, fake, net, root)
	t.Cleanup(s.Close) // before root is removed: its log follower writes there
	id, cfg := runPod(t, s, "a", "")
	cid := createContainer(t, s, id, cfg, "app")
	removeBehindOurBack(t, fake, id)
	net.mu.Lock()
	net.tearDownErr = errors.New("CNI DEL: plugin failed")
	net.mu.Unlock()
	s2 := newNetService(t, fake, net, root)
	t.Cleanup(s2.Close)
	fi, err := os.Stat(s2.checkpoints.path(id))
	if err != nil {
		t.Fatal(err)
	}
	var ctrCreated int64
	for _, c := range fake.Containers() {
		if c.ID == cid {
			at, _ := time.Parse(time.RFC3339Nano, c.Created)
			ctrCreated = at.Unix() * int64(time.Second)
		}
	}
	want := min(fi.ModTime().UnixNano(), ctrCreated)
	if got := sandboxStatus(t, s2, id).CreatedAt; got != want {
		t.Errorf("created_at %d, want %d, the earlier of the checkpoint's %d and the container's %d", got, want, fi.ModTime().UnixNano(), ctrCreated)
	}
}
