package core

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func containerCount(t *testing.T, fake *libdocker.Fake) int {
	t.Helper()
	list, err := fake.ListContainers(context.Background(), container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func wantInvalid(t *testing.T, what string, err error, fragment string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fragment) {
		t.Errorf("%s: %v, want InvalidArgument mentioning %q", what, err, fragment)
	}
}

func TestRunPodSandboxRefusesBadSettingsBeforeCreatingAnything(t *testing.T) {
	nsOpts := func(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.NamespaceOption {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{}}}
		return cfg.Linux.SecurityContext.NamespaceOptions
	}
	for _, tc := range []struct {
		name, fragment string
		edit           func(*runtimeapi.PodSandboxConfig)
	}{
		{"network mode 99", "namespace_options.network", func(c *runtimeapi.PodSandboxConfig) { nsOpts(c).Network = 99 }},
		{"pid mode 99", "namespace_options.pid", func(c *runtimeapi.PodSandboxConfig) { nsOpts(c).Pid = 99 }},
		{"ipc mode -1", "namespace_options.ipc", func(c *runtimeapi.PodSandboxConfig) { nsOpts(c).Ipc = -1 }},
		{"userns mode 99", "userns_options.mode", func(c *runtimeapi.PodSandboxConfig) {
			nsOpts(c).UsernsOptions = &runtimeapi.UserNamespace{Mode: 99}
		}},
		{"hostname with spaces and slashes", "hostname", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "my host/../x" }},
		{"hostname upper case", "RFC 1123", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "Web" }},
		{"hostname of 65 bytes", "at most 64", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("a", 65) }},
		{"hostname with two trailing dots", "RFC 1123", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "web.svc.." }},
		{"hostname of a dot", "RFC 1123", func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "." }},
		{"supplemental groups policy 99", "supplemental_groups_policy", func(c *runtimeapi.PodSandboxConfig) {
			nsOpts(c)
			c.Linux.SecurityContext.SupplementalGroupsPolicy = 99
		}},
		{"port protocol 99", "unknown protocol", func(c *runtimeapi.PodSandboxConfig) {
			c.PortMappings = []*runtimeapi.PortMapping{{Protocol: 99, ContainerPort: 80, HostPort: 8080}}
		}},
		{"shm-size 1Ei", "node's memory", func(c *runtimeapi.PodSandboxConfig) { c.Annotations[shmSizeAnnotation] = "1Ei" }},
		{"shm-size 1e100", "node's memory", func(c *runtimeapi.PodSandboxConfig) { c.Annotations[shmSizeAnnotation] = "1e100" }},
		// resource.ParseQuantity would take most of a minute over this one.
		{"shm-size 1e-99999999", "exponent", func(c *runtimeapi.PodSandboxConfig) { c.Annotations[shmSizeAnnotation] = "1e-99999999" }},
		{"CRI-O shm-size 1Ei", "node's memory", func(c *runtimeapi.PodSandboxConfig) { c.Annotations[crioShmSizeAnnotation] = "1Ei" }},
	} {
		fake := libdocker.NewFake()
		s := newTestService(t, fake, Options{})
		cfg := sandboxConfig("p")
		tc.edit(cfg)
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		wantInvalid(t, tc.name, err, tc.fragment)
		if n := containerCount(t, fake); n != 0 {
			t.Errorf("%s: %d containers created", tc.name, n)
		}
	}

	// What the kubelet sends is accepted: a DNS label, or an FQDN of up to 64 bytes, absolute
	// (a trailing dot) when the kubelet's clusterDomain is empty (the node e2e suite's
	// "setHostnameAsFQDN is set to true" spec).
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for i, h := range []string{"web-0", strings.Repeat("a", 30) + "." + strings.Repeat("b", 33), "hostfqdn-1.t.ns-2.svc."} {
		cfg := sandboxConfig("ok" + string(rune('a'+i)))
		cfg.Hostname = h
		cfg.Annotations[shmSizeAnnotation] = "64Mi"
		if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg}); err != nil {
			t.Errorf("hostname %q: %v", h, err)
		}
	}
}

func TestCreateContainerRefusesBadSettingsBeforeCreatingAnything(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	other := sandboxConfig("other")
	for _, tc := range []struct {
		name, fragment string
		edit           func(*runtimeapi.ContainerConfig, *runtimeapi.PodSandboxConfig)
	}{
		{"container pid mode 99", "container namespace_options.pid", func(c *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: 99}}}
		}},
		{"container supplemental groups policy 99", "supplemental_groups_policy", func(c *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: 99}}
		}},
		{"mount propagation 99", "unknown propagation", func(c *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data", Propagation: 99}}
		}},
		{"sandbox_config of another pod", "does not match pod sandbox", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.PodSandboxConfig) {
			sc.Metadata = other.Metadata
		}},
		{"sandbox_config with another uid", "does not match pod sandbox", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.PodSandboxConfig) {
			sc.Metadata = &runtimeapi.PodSandboxMetadata{Name: podCfg.Metadata.Name, Namespace: podCfg.Metadata.Namespace, Uid: "someone-else", Attempt: podCfg.Metadata.Attempt}
		}},
		{"sandbox_config hostname", "hostname", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.PodSandboxConfig) { sc.Hostname = "a b" }},
	} {
		for _, restarted := range []bool{false, true} {
			svc := s
			if restarted { // the sandbox's record comes from Docker, not from RunPodSandbox
				svc = newTestService(t, fake, Options{})
			}
			cfg, sc := containerConfig("c"), sandboxConfig("p")
			tc.edit(cfg, sc)
			_, err := svc.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sc})
			wantInvalid(t, tc.name, err, tc.fragment)
			if n := containerCount(t, fake); n != 1 {
				t.Errorf("%s: %d containers, want only the sandbox", tc.name, n)
			}
		}
	}
	createContainer(t, s, podID, podCfg, "good")
	createContainer(t, newTestService(t, fake, Options{}), podID, podCfg, "good-after-restart")
}
