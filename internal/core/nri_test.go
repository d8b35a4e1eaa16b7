package core

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/nri"
	"github.com/cri-dockerd/cri-dockerd/internal/nri/nritest"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// nriNode is a service hosting NRI on a socket of the test's, with plugin p connected.
func nriNode(t *testing.T) (*Service, *libdocker.Fake, *nritest.Plugin) {
	t.Helper()
	fake := libdocker.NewFake()
	socket := nritest.SocketPath(t)
	s := newTestService(t, fake, Options{NRI: nri.Config{
		Enable: true, SocketPath: socket, PluginPath: t.TempDir(), PluginConfigPath: t.TempDir(),
		RegistrationTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second,
	}})
	t.Cleanup(s.Close)
	if s.nri == nil {
		t.Fatalf("NRI is not hosted: %s", s.NRIState())
	}
	p := &nritest.Plugin{}
	nritest.Connect(t, p, socket, "10", "test")
	testutil.Eventually(t, testutil.Scaled(10*time.Second), 10*time.Millisecond, func() bool { return s.nri.Plugins() == 1 },
		"the plugin is not synchronized")
	return s, fake, p
}

// A plugin hears of a pod's and its container's whole life in order, with their IDs and names;
// a container that exits on its own is stopped for it once.
func TestNRIPluginHearsEveryEventInOrder(t *testing.T) {
	s, fake, p := nriNode(t)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "nri", "")
	id := startedContainer(t, s, podID, podCfg, "app")
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	// Stopped again: no second event.
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"RunPodSandbox nri", "CreateContainer app", "PostCreateContainer app", "StartContainer app", "PostStartContainer app",
		"StopContainer app", "RemoveContainer app", "StopPodSandbox nri", "RemovePodSandbox nri",
	}
	if got := p.Names(); !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	for _, e := range p.Events() {
		if e.PodID != podID || (e.ContainerID != "" && e.ContainerID != id) {
			t.Errorf("%v: pod %q container %q, want %q and %q", e, e.PodID, e.ContainerID, podID, id)
		}
	}

	// A container that exits on its own (Docker's die event) is stopped for plugins, once.
	p.Reset()
	podID, podCfg = runPod(t, s, "exits", "")
	id = startedContainer(t, s, podID, podCfg, "quits")
	fake.ExitContainer(id, 3)
	testutil.Eventually(t, testutil.Scaled(10*time.Second), 10*time.Millisecond, func() bool {
		return slices.Contains(p.Names(), "StopContainer quits")
	}, "no StopContainer for a container that exited: %q", p.Names())
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range p.Names() {
		if name == "StopContainer quits" {
			n++
		}
	}
	if n != 1 || p.Names()[len(p.Names())-1] != "RemoveContainer quits" {
		t.Errorf("events %q: want one StopContainer, then RemoveContainer last", p.Names())
	}
}

// A plugin's error fails the call and leaves nothing; the retry works.
func TestNRIHookErrorsFailTheCallAndLeaveNothing(t *testing.T) {
	s, fake, p := nriNode(t)
	ctx := context.Background()
	p.FailRun = errors.New("no room for this pod")
	_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("refused")})
	if err == nil || !strings.Contains(err.Error(), "no room for this pod") {
		t.Fatalf("RunPodSandbox with the plugin failing it: %v", err)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left after a failed RunPodSandbox", n)
	}
	podID, podCfg := runPod(t, s, "refused", "")

	p.FailCreate = errors.New("no devices left")
	_, err = s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("app"), SandboxConfig: podCfg})
	if err == nil || !strings.Contains(err.Error(), "no devices left") {
		t.Fatalf("CreateContainer with the plugin failing it: %v", err)
	}
	if n := len(fake.Containers()); n != 1 {
		t.Errorf("%d containers after a failed CreateContainer, want the sandbox alone", n)
	}
	// Plugins heard of the failed container's stop and removal, as containerd tells them.
	names := p.Names()
	if !slices.Equal(names[len(names)-3:], []string{"CreateContainer app", "StopContainer app", "RemoveContainer app"}) {
		t.Errorf("events %q", names)
	}
	createContainer(t, s, podID, podCfg, "app")
}

// While a plugin's RunPodSandbox or CreateContainer hook runs, the sandbox or container is not
// listed and has no status, and a sandbox takes no container.
func TestNRIHidesWhatItsHookHasNotAnsweredFor(t *testing.T) {
	s, _, _ := nriNode(t)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "pending", "")
	s.nriPending.set(podID, true)
	if resp, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil || len(resp.Items) != 0 {
		t.Errorf("ListPodSandbox while its hook runs: %v, %v", resp, err)
	}
	_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID[:12]})
	wantCode(t, err, codes.NotFound)
	_, err = s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("early"), SandboxConfig: podCfg})
	wantCode(t, err, codes.FailedPrecondition)
	s.nriPending.set(podID, false)

	id := createContainer(t, s, podID, podCfg, "app")
	s.nriPending.set(id, true)
	if resp, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil || len(resp.Containers) != 0 {
		t.Errorf("ListContainers while its hook runs: %v, %v", resp, err)
	}
	_, err = s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	wantCode(t, err, codes.NotFound)
}

// An adjustment is applied by making the container again with it: plugins hear of the first
// one's removal and of the second one, which their same answer leaves as it is.
func TestNRIAdjustmentMakesTheContainerAgain(t *testing.T) {
	s, fake, p := nriNode(t)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "adjusted", "")
	// Through adaptation's merged answer, whose shape (empty messages where nothing is set)
	// differs from a hand-made adjustment: a device under linux brings an empty Rdt with it.
	old := statDevice
	t.Cleanup(func() { statDevice = old })
	statDevice = func(p string) (string, int64, int64, error) {
		if p == "/dev/nri-test" {
			return "c", 1, 3, nil
		}
		return "", 0, 0, errors.New("no such node")
	}
	p.Adjust = func(*api.Container) *api.ContainerAdjustment {
		adj := &api.ContainerAdjustment{}
		adj.AddEnv("INJECTED", "by-nri")
		adj.AddDevice(&api.LinuxDevice{Path: "/dev/nri-test", Type: "c", Major: 1, Minor: 3})
		return adj
	}
	p.Reset()
	id := createContainer(t, s, podID, podCfg, "app")
	c, err := fake.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Config.Env, "INJECTED=by-nri") || len(c.HostConfig.Devices) != 1 || c.HostConfig.Devices[0].PathInContainer != "/dev/nri-test" {
		t.Errorf("env %q, devices %+v: the adjustment was not applied", c.Config.Env, c.HostConfig.Devices)
	}
	events := p.Events()
	var names []string
	for _, e := range events {
		names = append(names, e.Name)
	}
	want := []string{"CreateContainer", "StopContainer", "RemoveContainer", "CreateContainer", "PostCreateContainer"}
	if !slices.Equal(names, want) || events[0].ContainerID == id || events[3].ContainerID != id || events[4].ContainerID != id {
		t.Errorf("events %v, want %q with the second container (%s) last", events, want, id)
	}
	if n := len(fake.Containers()); n != 2 {
		t.Errorf("%d containers, want the sandbox and the adjusted one", n)
	}

	// What Docker cannot apply fails the create, naming the field, and leaves nothing.
	p.Adjust = func(*api.Container) *api.ContainerAdjustment {
		adj := &api.ContainerAdjustment{}
		adj.SetLinuxCgroupsPath("/elsewhere")
		return adj
	}
	_, err = s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("other"), SandboxConfig: podCfg})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cgroups_path") {
		t.Errorf("an adjustment of the cgroups path: %v, want InvalidArgument naming it", err)
	}
	if n := len(fake.Containers()); n != 2 {
		t.Errorf("%d containers after a refused adjustment, want 2", n)
	}
}

// A plugin that connects is given every pod and container there is.
func TestNRISynchronizeGivesEveryPodAndContainer(t *testing.T) {
	s, _, _ := nriNode(t)
	podID, podCfg := runPod(t, s, "before", "")
	id := createContainer(t, s, podID, podCfg, "app")
	late := &nritest.Plugin{}
	nritest.Connect(t, late, s.opts.NRI.SocketPath, "20", "late")
	testutil.Eventually(t, testutil.Scaled(10*time.Second), 10*time.Millisecond, func() bool { return s.nri.Plugins() == 2 },
		"the second plugin is not synchronized")
	if !slices.Equal(late.Synced.Pods, []string{podID}) || !slices.Equal(late.Synced.Containers, []string{id}) {
		t.Errorf("synchronized pods %v containers %v, want %s and %s", late.Synced.Pods, late.Synced.Containers, podID, id)
	}
}

// Another runtime serving the socket (containerd's NRI) keeps it: NRI is off, and says why.
func TestNRIStaysOffWhenTheSocketIsServed(t *testing.T) {
	socket := nritest.SocketPath(t)
	other := newTestService(t, libdocker.NewFake(), Options{NRI: nri.Config{Enable: true, SocketPath: socket, PluginPath: t.TempDir(), PluginConfigPath: t.TempDir()}})
	t.Cleanup(other.Close)
	second := newTestService(t, libdocker.NewFake(), Options{NRI: nri.Config{Enable: true, SocketPath: socket, PluginPath: t.TempDir(), PluginConfigPath: t.TempDir()}})
	t.Cleanup(second.Close)
	if other.nri == nil {
		t.Fatalf("the first host: %s", other.NRIState())
	}
	if second.nri != nil || !strings.Contains(second.NRIState(), "served by another runtime") {
		t.Errorf("the second host on the same socket: %q", second.NRIState())
	}
}
