package core

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Port mappings are checked at both ends of 1-65535 (a host port may be 0: none).
func TestRunPodSandboxPortLimits(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for i, tc := range []struct {
		host, ctr int32
		ok        bool
	}{
		{0, 1, true}, {65535, 65535, true},
		{0, 0, false}, {0, 65536, false}, {-1, 80, false}, {65536, 80, false},
	} {
		cfg := sandboxConfig(fmt.Sprintf("p%d", i))
		cfg.PortMappings = []*runtimeapi.PortMapping{{HostPort: tc.host, ContainerPort: tc.ctr}}
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if tc.ok && err != nil {
			t.Errorf("port mapping %d->%d: %v, want it accepted", tc.host, tc.ctr, err)
		}
		if !tc.ok && status.Code(err) != codes.InvalidArgument {
			t.Errorf("port mapping %d->%d: %v, want InvalidArgument", tc.host, tc.ctr, err)
		}
	}
}

// A pod in the node's PID namespace gets Docker's host PID mode; others their own.
func TestRunPodSandboxPIDNamespace(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for name, mode := range map[string]runtimeapi.NamespaceMode{"node": runtimeapi.NamespaceMode_NODE, "pod": runtimeapi.NamespaceMode_POD} {
		cfg := sandboxConfig(name)
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: mode}}}
		resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		c, err := fake.InspectContainer(context.Background(), resp.PodSandboxId)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"node": "host", "pod": ""}[name]; string(c.HostConfig.PidMode) != want {
			t.Errorf("pid %v: PidMode %q, want %q", mode, c.HostConfig.PidMode, want)
		}
	}
}

// The pause image is pulled when Docker does not have it.
func TestRunPodSandboxPullsAMissingPauseImage(t *testing.T) {
	const pause = "registry.k8s.io/pause:3.10.1"
	fake := libdocker.NewFake()
	fake.AddPullable(pause, libdocker.FakeImage("", "", pause))
	s := newTestService(t, fake, Options{PodInfraImage: pause})
	if _, err := fake.InspectImage(context.Background(), pause); !libdocker.IsNotFound(err) {
		t.Fatalf("the pause image is there before the pod: %v", err)
	}
	runPod(t, s, "p", "")
	if n := fake.Calls("PullImage"); n != 1 {
		t.Errorf("%d pulls of the missing pause image, want 1", n)
	}
	fake.ResetCalls()
	runPod(t, s, "q", "")
	if n := fake.Calls("PullImage"); n != 0 {
		t.Errorf("%d pulls of a pause image Docker has, want 0", n)
	}
}
