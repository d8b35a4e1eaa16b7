package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// warnings collects what s logs at warning level and above.
func warnings(s *Service) func() []string {
	hook := test.NewLocal(s.log.Logger)
	return func() []string {
		var out []string
		for _, e := range hook.AllEntries() {
			if e.Level <= logrus.WarnLevel {
				out = append(out, e.Level.String()+": "+e.Message)
			}
		}
		return out
	}
}

// A pod's life without faults puts no warning in cri-dockerd's log: each warning there is a
// fault to look into. The pod uses the node's IPC namespace without a /dev/shm size, has
// hairpin mode set on its port, and a container asks for no hugepages.
func TestAPodWithoutFaultsLogsNoWarnings(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.51") // older engines are a warning of their own
	s := newTestService(t, fake, Options{HairpinVeth: true, hairpin: func(int) error { return nil }})
	logged := warnings(s)
	cfg := sandboxConfig("quiet")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}}
	resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	podID := resp.PodSandboxId
	c := containerConfig("c")
	c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}}}
	created, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ContainerId
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	for _, w := range logged() {
		t.Error(w)
	}
}

// A hugepages limit is a warning, once: Docker cannot set it per container.
func TestHugepageLimitIsAWarningOnce(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.51")
	s := newTestService(t, fake, Options{})
	logged := warnings(s)
	podID, podCfg := runPod(t, s, "huge", "")
	for _, name := range []string{"a", "b"} {
		c := containerConfig(name)
		c.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}}}
		if _, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: podCfg}); err != nil {
			t.Fatal(err)
		}
	}
	if got := logged(); len(got) != 1 {
		t.Errorf("warnings %q, want one of the hugepages limit", got)
	}
}

// The rollback of a RunPodSandbox whose start failed removes the sandbox container without a
// word about the removal: it worked.
func TestRollbackThatWorksLogsNothingOfIt(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	logged := warnings(s)
	fake.InjectError("StartContainer", errors.New("OCI runtime create failed"))
	if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("rollback")}); err == nil {
		t.Fatal("RunPodSandbox succeeded although the start failed")
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left after the rollback", n)
	}
	for _, w := range logged() {
		if strings.Contains(w, "remove container") {
			t.Error(w)
		}
	}
}

// Listing pods on a node with network checkpoints reads them without a warning.
func TestListingPodsWithCheckpointsLogsNoWarning(t *testing.T) {
	s := newNetService(t, libdocker.NewFake(), &fakeNet{}, t.TempDir())
	logged := warnings(s)
	id, _ := runPod(t, s, "a", "")
	if got := listSandboxes(t, s, nil); got[id] == nil {
		t.Fatalf("ListPodSandbox = %v, want %s", got, id)
	}
	for _, w := range logged() {
		if strings.Contains(w, "checkpoint") {
			t.Error(w)
		}
	}
}

// A CNI pod's namespace pinned, and after a failed set up unpinned and its checkpoint removed,
// puts no warning about any of it in the log (an undo's own failures are warnings: "<nil>" is
// the message of a warning about no error).
func TestNetworkPinsWithoutFaultsLogNoWarnings(t *testing.T) {
	for _, setUpErr := range []error{nil, errors.New("CNI ADD: plugin failed")} {
		s := newNetService(t, libdocker.NewFake(), &fakeNet{setUpErr: setUpErr}, t.TempDir())
		t.Cleanup(s.Close)
		logged := warnings(s)
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("pinned")})
		if (err == nil) != (setUpErr == nil) {
			t.Fatalf("set up error %v: RunPodSandbox = %v", setUpErr, err)
		}
		for _, w := range logged() {
			if strings.Contains(w, "pinned") || strings.HasSuffix(w, "<nil>") {
				t.Errorf("set up error %v: %s", setUpErr, w)
			}
		}
	}
}

// The service logs to the logger it is given (cri-dockerd's, at its --log-level), not to
// logrus's standard one.
func TestServiceLogsToItsLogger(t *testing.T) {
	fake := libdocker.NewFake() // API 1.41: RunPodSandbox warns that annotations do not reach runtimes
	fake.SetDockerRootDir(t.TempDir())
	fake.AddImage(libdocker.FakeImage("", "", testPauseImage))
	logger, hook := test.NewNullLogger()
	s, err := New(context.Background(), fake, Options{PodInfraImage: testPauseImage, DefaultRuntimeHandler: "docker", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	runPod(t, s, "logged", "")
	if len(hook.AllEntries()) == 0 {
		t.Error("nothing logged to the service's logger")
	}
}
