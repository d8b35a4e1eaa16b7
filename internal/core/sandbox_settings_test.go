package core

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// hostEverything is a sandbox_config that claims the node's namespaces, privileges and another
// cgroup parent: what a request may say, not what the sandbox was created with.
func hostEverything(cfg *runtimeapi.PodSandboxConfig, parent string) *runtimeapi.PodSandboxConfig {
	cfg = proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent: parent,
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			Privileged: true,
			NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE,
			},
		},
	}
	return cfg
}

// CreateContainer takes the pod-level settings (host network, IPC and PID, privileged, the
// cgroup parent) from the sandbox as it was created, as containerd does from its record: a
// request's sandbox_config that says more gets none of it. Also after a restart, when the
// sandbox's record comes from Docker.
func TestCreateContainerTakesPodSettingsFromTheSandbox(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podCfg := sandboxConfig("plain")
	podCfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/podplain"}
	resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	podID := resp.PodSandboxId
	claim := hostEverything(podCfg, "/kubepods/other")

	for _, restarted := range []bool{false, true} {
		s := s
		if restarted {
			s = newTestService(t, fake, Options{})
		}
		privileged := containerConfig("privileged")
		securityCtx(privileged).Privileged = true
		_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: privileged, SandboxConfig: claim})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "privileged") {
			t.Errorf("restarted=%v: privileged container in a pod created unprivileged: %v, want InvalidArgument", restarted, err)
		}

		hook := logtest.NewLocal(s.log.Logger)
		s.log.Logger.SetLevel(logrus.DebugLevel)
		cfg := containerConfig("c")
		securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
		created, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: claim})
		if err != nil {
			t.Fatalf("restarted=%v: %v", restarted, err)
		}
		said := false
		for _, e := range hook.AllEntries() {
			said = said || (e.Level == logrus.DebugLevel && strings.Contains(e.Message, "host network=true") && strings.Contains(e.Message, `cgroup_parent="/kubepods/other"`))
		}
		if !said {
			t.Errorf("restarted=%v: no debug line on the sandbox_config that disagrees with the sandbox", restarted)
		}
		c, _ := fake.InspectContainer(ctx, created.ContainerId)
		hc := c.HostConfig
		join := "container:" + podID
		if string(hc.NetworkMode) != join || string(hc.IpcMode) != join || string(hc.PidMode) != join || hc.Privileged {
			t.Errorf("restarted=%v: network %q IPC %q PID %q privileged %v; want the sandbox's namespaces, unprivileged", restarted, hc.NetworkMode, hc.IpcMode, hc.PidMode, hc.Privileged)
		}
		if hc.CgroupParent != "/kubepods/besteffort/podplain" {
			t.Errorf("restarted=%v: cgroup parent %q, want the sandbox's", restarted, hc.CgroupParent)
		}
		if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId}); err != nil {
			t.Fatal(err)
		}
	}
}

// The other way round: a pod created with the node's namespaces and privileges keeps them for
// its containers whatever the request's sandbox_config says.
func TestCreateContainerKeepsTheSandboxsHostSettings(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podCfg := hostEverything(sandboxConfig("host"), "/kubepods/podhost")
	resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	plain := sandboxConfig("host") // same metadata, nothing else
	for _, restarted := range []bool{false, true} {
		s := s
		if restarted {
			s = newTestService(t, fake, Options{})
		}
		cfg := containerConfig("c")
		securityCtx(cfg).Privileged = true
		securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
		created, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: plain})
		if err != nil {
			t.Fatalf("restarted=%v: %v", restarted, err)
		}
		c, _ := fake.InspectContainer(ctx, created.ContainerId)
		hc := c.HostConfig
		if hc.NetworkMode != "host" || hc.IpcMode != "host" || hc.PidMode != "host" || !hc.Privileged || hc.CgroupParent != "/kubepods/podhost" {
			t.Errorf("restarted=%v: network %q IPC %q PID %q privileged %v cgroup parent %q; want the sandbox's", restarted, hc.NetworkMode, hc.IpcMode, hc.PidMode, hc.Privileged, hc.CgroupParent)
		}
		if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: created.ContainerId}); err != nil {
			t.Fatal(err)
		}
	}
}

// A PID namespace TARGET must be a running container of the same pod, as in containerd: not
// another pod's container, not one that is not running, not a sandbox.
func TestPIDTargetMustBeARunningContainerOfThePod(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "mine", "")
	otherID, otherCfg := runPod(t, s, "other", "")
	running := startedContainer(t, s, podID, podCfg, "running")
	created := createContainer(t, s, podID, podCfg, "created")
	foreign := startedContainer(t, s, otherID, otherCfg, "foreign")

	target := func(id string) (*container.InspectResponse, error) {
		cfg := containerConfig("debug")
		cfg.Metadata.Attempt = uint32(len(fake.Containers()))
		securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: id}
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			return nil, err
		}
		return fake.InspectContainer(ctx, resp.ContainerId)
	}
	for _, tc := range []struct {
		name, id string
		code     codes.Code
	}{
		{"another pod's container", foreign, codes.InvalidArgument},
		{"another pod's container by short ID", foreign[:12], codes.InvalidArgument},
		{"another pod's sandbox", otherID, codes.InvalidArgument},
		{"its own sandbox", podID, codes.InvalidArgument},
		{"a container that is not running", created, codes.FailedPrecondition},
		{"no such container", "0123456789ab", codes.NotFound},
	} {
		before := len(fake.Containers())
		_, err := target(tc.id)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.id) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.code, tc.id)
		}
		if after := len(fake.Containers()); after != before {
			t.Errorf("%s: %d containers after a refused create, want %d", tc.name, after, before)
		}
	}
	c, err := target(running[:12])
	if err != nil {
		t.Fatalf("a running container of the pod: %v", err)
	}
	if c.HostConfig.PidMode != container.PidMode("container:"+running) {
		t.Errorf("PidMode %q, want the target's namespace", c.HostConfig.PidMode)
	}
}

// Where a sandbox's pod settings come from: its Docker configuration, and for privileged our
// label; upstream cri-dockerd made the pause container of a privileged pod privileged itself,
// and for a sandbox of ours made before the label nothing is known (the request is taken).
func TestSettingsOfASandboxContainer(t *testing.T) {
	host := &container.HostConfig{NetworkMode: "host", IpcMode: "host", PidMode: "host", Resources: container.Resources{CgroupParent: "pod.slice"}}
	plain := &container.HostConfig{NetworkMode: "none", IpcMode: "shareable", Resources: container.Resources{CgroupParent: "/kubepods/pod"}}
	privilegedPause := &container.HostConfig{NetworkMode: "default", IpcMode: "shareable", Privileged: true}
	for _, tc := range []struct {
		name   string
		hc     *container.HostConfig
		labels map[string]string
		want   podSettings
	}{
		{"ours, privileged", host, map[string]string{handlerLabel: "", privilegedPodLabel: "true"},
			podSettings{hostNetwork: true, hostIPC: true, hostPID: true, privileged: true, privilegedKnown: true, cgroupParent: "pod.slice"}},
		{"ours, not privileged", plain, map[string]string{handlerLabel: "runc", privilegedPodLabel: "false"},
			podSettings{privilegedKnown: true, cgroupParent: "/kubepods/pod"}},
		{"ours, before the label", plain, map[string]string{handlerLabel: ""},
			podSettings{cgroupParent: "/kubepods/pod"}},
		{"upstream, privileged pause", privilegedPause, map[string]string{containerTypeLabel: containerTypeSandbox},
			podSettings{privileged: true, privilegedKnown: true}},
		{"upstream", plain, map[string]string{containerTypeLabel: containerTypeSandbox},
			podSettings{privilegedKnown: true, cgroupParent: "/kubepods/pod"}},
	} {
		if got := settingsOf(tc.hc, tc.labels); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
