package core

import (
	"context"
	"maps"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// The index rebuilt at start knows which sandboxes had exited meanwhile: CreateContainer into
// one is refused at once, into a running one it is not.
func TestRebuiltIndexKnowsTheSandboxesThatExited(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	exited, exitedCfg := runPod(t, s, "exited", "")
	running, runningCfg := runPod(t, s, "running", "")
	if err := fake.StopContainer(context.Background(), exited, 0); err != nil { // while we were down
		t.Fatal(err)
	}
	s2 := newTestService(t, fake, Options{})
	if got := s2.sandboxes.ended(exited); got != sandboxExited {
		t.Errorf("the exited sandbox after the start: %v, want exited", got)
	}
	if got := s2.sandboxes.ended(running); got != sandboxRunning {
		t.Errorf("the running sandbox after the start: %v, want running", got)
	}
	_, err := s2.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: exited, Config: containerConfig("c"), SandboxConfig: exitedCfg})
	wantCode(t, err, codes.FailedPrecondition)
	createContainer(t, s2, running, runningCfg, "c")
}

// The pod metrics count the sandboxes of each handler.
func TestPodsByHandlerCountsEachHandler(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{})
	runPod(t, s, "a", "kata")
	runPod(t, s, "b", "kata")
	runPod(t, s, "c", "")
	if got, want := s.PodsByHandler(), map[string]int{"kata": 2, "": 1}; !maps.Equal(got, want) {
		t.Errorf("PodsByHandler = %v, want %v", got, want)
	}
}

// A sandbox removed behind our back before any status reports the namespaces it was run with.
func TestSandboxRemovedBeforeAnyStatusKeepsItsNamespaces(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	node := runtimeapi.NamespaceMode_NODE
	for name, ns := range map[string]*runtimeapi.NamespaceOption{
		"host": {Network: node, Pid: node, Ipc: node},
		"pod":  {},
	} {
		cfg := sandboxConfig(name)
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}}
		resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		createContainer(t, s, resp.PodSandboxId, cfg, "app")
		removeBehindOurBack(t, fake, resp.PodSandboxId)
		got := sandboxStatus(t, s, resp.PodSandboxId).GetLinux().GetNamespaces().GetOptions()
		want := runtimeapi.NamespaceMode_POD
		if name == "host" {
			want = node
		}
		if got.GetNetwork() != want || got.GetPid() != want || got.GetIpc() != want {
			t.Errorf("%s pod removed behind our back: namespaces %v, want all %v", name, got, want)
		}
	}
}

// A list, which does not say a sandbox's namespaces, does not make us forget them: a host
// network pod listed and then removed behind our back still reports the node's namespace.
func TestSandboxListedThenRemovedKeepsItsNamespaces(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	node := runtimeapi.NamespaceMode_NODE
	cfg := sandboxConfig("host")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: node}}}
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.PodSandboxId
	createContainer(t, s, id, cfg, "app")
	if got := listSandboxes(t, s, nil); got[id] == nil {
		t.Fatalf("ListPodSandbox = %v, want %s", got, id)
	}
	removeBehindOurBack(t, fake, id)
	if got := sandboxStatus(t, s, id).GetLinux().GetNamespaces().GetOptions().GetNetwork(); got != node {
		t.Errorf("network namespace after a list and a removal = %v, want %v", got, node)
	}
}
