package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

const blockChmodProfile = `{
  "defaultAction": "SCMP_ACT_ALLOW",
  "syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}]
}`

// createWith creates a container with cfg modified by mutate and returns what Docker recorded.
func createWith(t *testing.T, s *Service, fake *libdocker.Fake, mutate func(*runtimeapi.ContainerConfig)) (*container.InspectResponse, error) {
	t.Helper()
	cfg := containerConfig("c")
	mutate(cfg)
	// The kubelet marks the pod privileged when one of its containers is.
	podCfg := sandboxConfig("p" + randomSuffix())
	if cfg.GetLinux().GetSecurityContext().GetPrivileged() {
		podCfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
	}
	pod, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	podID := pod.PodSandboxId
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		return nil, err
	}
	c, err := fake.InspectContainer(context.Background(), resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	return c, nil
}

func randomSuffix() string { return strings.ToLower(randomizeName(""))[1:] }

func securityCtx(cfg *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	return cfg.Linux.SecurityContext
}

func TestSecurityContextReachesDocker(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "block-chmod.json")
	if err := os.WriteFile(profile, []byte(blockChmodProfile), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(sc *runtimeapi.LinuxContainerSecurityContext)
		check  func(t *testing.T, c *container.InspectResponse)
	}{
		{"nil seccomp profile is unconfined", func(sc *runtimeapi.LinuxContainerSecurityContext) {}, func(t *testing.T, c *container.InspectResponse) {
			wantOpts(t, c, "seccomp=unconfined")
		}},
		{"runtime default seccomp keeps Docker's filter", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		}, func(t *testing.T, c *container.InspectResponse) { wantOpts(t, c) }},
		{"unconfined seccomp", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
		}, func(t *testing.T, c *container.InspectResponse) { wantOpts(t, c, "seccomp=unconfined") }},
		{"localhost seccomp profile is passed as JSON", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}
		}, func(t *testing.T, c *container.InspectResponse) {
			wantOpts(t, c, `seccomp={"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO","names":["chmod","fchmodat"]}]}`)
		}},
		{"legacy seccomp path runtime/default", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.SeccompProfilePath = "runtime/default" },
			func(t *testing.T, c *container.InspectResponse) { wantOpts(t, c) }},
		{"legacy seccomp localhost path", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.SeccompProfilePath = "localhost/" + profile },
			func(t *testing.T, c *container.InspectResponse) {
				if len(c.HostConfig.SecurityOpt) != 1 || !strings.HasPrefix(c.HostConfig.SecurityOpt[0], `seccomp={"defaultAction"`) {
					t.Errorf("SecurityOpt %q", c.HostConfig.SecurityOpt)
				}
			}},
		{"apparmor unconfined, selinux, no_new_privs", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Seccomp = &runtimeapi.SecurityProfile{}
			sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
			sc.SelinuxOptions = &runtimeapi.SELinuxOption{User: "system_u", Role: "system_r", Type: "container_t", Level: "s0:c1,c2"}
			sc.NoNewPrivs = true
		}, func(t *testing.T, c *container.InspectResponse) {
			wantOpts(t, c, "no-new-privileges", "apparmor=unconfined", "label=user:system_u", "label=role:system_r", "label=type:container_t", "label=level:s0:c1,c2")
		}},
		{"capabilities, ALL included, normalized", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN", "cap_sys_time"}, DropCapabilities: []string{"ALL"}}
		}, func(t *testing.T, c *container.InspectResponse) {
			if !slices.Equal(c.HostConfig.CapAdd, []string{"CAP_NET_ADMIN", "CAP_SYS_TIME"}) || !slices.Equal(c.HostConfig.CapDrop, []string{"ALL"}) {
				t.Errorf("CapAdd %q CapDrop %q", c.HostConfig.CapAdd, c.HostConfig.CapDrop)
			}
		}},
		{"user, group, supplemental groups", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: 1001}
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1002}
			sc.SupplementalGroups = []int64{1234, 5678}
		}, func(t *testing.T, c *container.InspectResponse) {
			if c.Config.User != "1001:1002" || !slices.Equal(c.HostConfig.GroupAdd, []string{"1234", "5678"}) {
				t.Errorf("User %q GroupAdd %q", c.Config.User, c.HostConfig.GroupAdd)
			}
		}},
		{"username", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.RunAsUsername = "nobody" },
			func(t *testing.T, c *container.InspectResponse) {
				if c.Config.User != "nobody" {
					t.Errorf("User %q", c.Config.User)
				}
			}},
		{"username and group", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUsername = "nobody"
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1002}
		}, func(t *testing.T, c *container.InspectResponse) {
			if c.Config.User != "nobody:1002" {
				t.Errorf("User %q", c.Config.User)
			}
		}},
		{"masked and read-only paths, read-only root", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.MaskedPaths = []string{"/bin/ls", "/proc/kcore"}
			sc.ReadonlyPaths = []string{"/tmp"}
			sc.ReadonlyRootfs = true
		}, func(t *testing.T, c *container.InspectResponse) {
			if !slices.Equal(c.HostConfig.MaskedPaths, []string{"/bin/ls", "/proc/kcore"}) || !slices.Equal(c.HostConfig.ReadonlyPaths, []string{"/tmp"}) || !c.HostConfig.ReadonlyRootfs {
				t.Errorf("MaskedPaths %q ReadonlyPaths %q ReadonlyRootfs %v", c.HostConfig.MaskedPaths, c.HostConfig.ReadonlyPaths, c.HostConfig.ReadonlyRootfs)
			}
		}},
		{"empty masked paths keep Docker's defaults", func(sc *runtimeapi.LinuxContainerSecurityContext) {},
			func(t *testing.T, c *container.InspectResponse) {
				if c.HostConfig.MaskedPaths != nil || c.HostConfig.ReadonlyPaths != nil {
					t.Errorf("MaskedPaths %q ReadonlyPaths %q, want Docker's defaults (nil)", c.HostConfig.MaskedPaths, c.HostConfig.ReadonlyPaths)
				}
			}},
		{"privileged: Docker's own paths", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Privileged = true
			sc.MaskedPaths = []string{"/proc/kcore"}
		}, func(t *testing.T, c *container.InspectResponse) {
			if !c.HostConfig.Privileged || c.HostConfig.MaskedPaths != nil {
				t.Errorf("Privileged %v MaskedPaths %q", c.HostConfig.Privileged, c.HostConfig.MaskedPaths)
			}
		}},
		{"node user namespace is fine", func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}
		}, func(t *testing.T, c *container.InspectResponse) {}},
	}
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) { tt.mutate(securityCtx(cfg)) })
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func wantOpts(t *testing.T, c *container.InspectResponse, want ...string) {
	t.Helper()
	got := c.HostConfig.SecurityOpt
	if !sameSet(got, want) {
		t.Errorf("SecurityOpt %q, want %q", got, want)
	}
}

func TestSecurityContextDockerCannotHonourIsRefused(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(notJSON, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(cfg *runtimeapi.ContainerConfig)
		code   codes.Code
	}{
		{"ambient capabilities", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}
		}, codes.Unimplemented},
		{"strict supplemental groups", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}, codes.Unimplemented},
		{"pod user namespace", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}}
		}, codes.Unimplemented},
		{"missing seccomp profile", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(dir, "nope.json")}
		}, codes.InvalidArgument},
		{"relative seccomp profile", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "profile.json"}
		}, codes.InvalidArgument},
		{"seccomp profile that is not JSON", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: notJSON}
		}, codes.InvalidArgument},
		{"unknown legacy seccomp value", func(cfg *runtimeapi.ContainerConfig) { securityCtx(cfg).SeccompProfilePath = "strict" }, codes.InvalidArgument},
		{"apparmor profile without AppArmor", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-profile"}
		}, codes.FailedPrecondition},
		{"pid target without id", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET}
		}, codes.InvalidArgument},
		{"pid target that does not exist", func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "0123456789ab"}
		}, codes.NotFound},
		{"CDI device on Docker 20.10", func(cfg *runtimeapi.ContainerConfig) {
			cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=0"}}
		}, codes.FailedPrecondition},
		{"device with bad permissions", func(cfg *runtimeapi.ContainerConfig) {
			cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/x", Permissions: "rwx"}}
		}, codes.InvalidArgument},
	}
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(fake.Containers())
			_, err := createWith(t, s, fake, tt.mutate)
			wantCode(t, err, tt.code)
			if after := len(fake.Containers()); after != before+1 { // the pod's sandbox only
				t.Errorf("%d containers after a refused create, want %d", after, before+1)
			}
		})
	}
}

func TestPrivilegedContainerNeedsAPrivilegedPod(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "unprivileged", "")
	cfg := containerConfig("c")
	securityCtx(cfg).Privileged = true
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	wantCode(t, err, codes.InvalidArgument)
}

func TestApparmorProfileWhereAppArmorIsEnabled(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetSecurityOptions("name=apparmor", "name=seccomp,profile=default")
	s := newTestService(t, fake, Options{})
	c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		securityCtx(cfg).Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/my-profile"}
		securityCtx(cfg).Seccomp = &runtimeapi.SecurityProfile{}
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOpts(t, c, "apparmor=my-profile")
	c, err = createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) { securityCtx(cfg).ApparmorProfile = "localhost/other" })
	if err != nil {
		t.Fatal(err)
	}
	wantOpts(t, c, "apparmor=other", "seccomp=unconfined")
}

func TestNamespaceOptionsOfContainers(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "ns", "")
	targetID := startedContainer(t, s, podID, podCfg, "target")
	for _, tt := range []struct {
		mode runtimeapi.NamespaceMode
		want container.PidMode
	}{
		{runtimeapi.NamespaceMode_POD, container.PidMode("container:" + podID)},
		{runtimeapi.NamespaceMode_CONTAINER, ""},
		// The node's only in a pod created with host PID (TestCreateContainerKeepsTheSandboxsHostSettings).
		{runtimeapi.NamespaceMode_NODE, container.PidMode("container:" + podID)},
		{runtimeapi.NamespaceMode_TARGET, container.PidMode("container:" + targetID)},
	} {
		cfg := containerConfig("c-" + strings.ToLower(tt.mode.String()))
		securityCtx(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: tt.mode, TargetId: targetID[:12]}
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatalf("%v: %v", tt.mode, err)
		}
		c, _ := fake.InspectContainer(ctx, resp.ContainerId)
		if c.HostConfig.PidMode != tt.want || c.HostConfig.NetworkMode != container.NetworkMode("container:"+podID) || c.HostConfig.IpcMode != container.IpcMode("container:"+podID) {
			t.Errorf("%v: PidMode %q NetworkMode %q IpcMode %q", tt.mode, c.HostConfig.PidMode, c.HostConfig.NetworkMode, c.HostConfig.IpcMode)
		}
	}
}

func TestSandboxSecurityContextReachesDocker(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	cfg := sandboxConfig("sec")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		RunAsUser:          &runtimeapi.Int64Value{Value: 65535},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 65534},
		SupplementalGroups: []int64{10},
		ReadonlyRootfs:     true,
		Privileged:         true,
		Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		SelinuxOptions:     &runtimeapi.SELinuxOption{Level: "s0:c1"},
	}}
	resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(ctx, resp.PodSandboxId)
	if c.Config.User != "65535:65534" || !slices.Equal(c.HostConfig.GroupAdd, []string{"10"}) || !c.HostConfig.ReadonlyRootfs {
		t.Errorf("User %q GroupAdd %q ReadonlyRootfs %v", c.Config.User, c.HostConfig.GroupAdd, c.HostConfig.ReadonlyRootfs)
	}
	// A privileged pod may run privileged containers; its pause container needs no privileges.
	if c.HostConfig.Privileged {
		t.Error("the pause container of a privileged pod is privileged")
	}
	wantOpts(t, c, "label=level:s0:c1")

	// A pod asking for its own user namespace is refused before anything is created.
	cfg = sandboxConfig("userns")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}},
	}}
	before := len(fake.Containers())
	_, err = s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	wantCode(t, err, codes.Unimplemented)
	if len(fake.Containers()) != before {
		t.Errorf("a refused sandbox left a container behind")
	}
}

func TestResourcesAndDevicesReachDocker(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 64 << 20,
			CpusetCpus: "0", CpusetMems: "0", OomScoreAdj: 500,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
			Unified:        map[string]string{"pids.max": "100", "memory.low": "1048576", "memory.high": "max"},
		}}
		cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/mynull"}, {HostPath: "/dev/zero", Permissions: "r"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	if hc.CPUPeriod != 100000 || hc.CPUQuota != 50000 || hc.CPUShares != 512 || hc.Memory != 64<<20 || hc.MemorySwap != 64<<20 ||
		hc.CpusetCpus != "0" || hc.CpusetMems != "0" || hc.OomScoreAdj != 500 || hc.PidsLimit == nil || *hc.PidsLimit != 100 || hc.MemoryReservation != 1<<20 {
		t.Errorf("resources %+v", hc.Resources)
	}
	wantDevices := []container.DeviceMapping{{PathOnHost: "/dev/null", PathInContainer: "/dev/mynull", CgroupPermissions: "rwm"}, {PathOnHost: "/dev/zero", PathInContainer: "/dev/zero", CgroupPermissions: "r"}}
	if !slices.Equal(hc.Devices, wantDevices) {
		t.Errorf("Devices %+v", hc.Devices)
	}
	if hc.CgroupParent != "" || hc.Annotations != nil {
		t.Errorf("CgroupParent %q, Annotations %v on API 1.41", hc.CgroupParent, hc.Annotations)
	}
}

func TestAnnotationsAndCDIWhereTheDaemonTakesThem(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.47")
	s := newTestService(t, fake, Options{})
	c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=0"}, {Name: "vendor.com/gpu=1"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HostConfig.DeviceRequests) != 1 || c.HostConfig.DeviceRequests[0].Driver != "cdi" || !slices.Equal(c.HostConfig.DeviceRequests[0].DeviceIDs, []string{"vendor.com/gpu=0", "vendor.com/gpu=1"}) {
		t.Errorf("DeviceRequests %+v", c.HostConfig.DeviceRequests)
	}
	a := c.HostConfig.Annotations
	if a[annotationContainerType] != "container" || a[annotationContainerName] != "c" || a[annotationSandboxNamespace] != "ns" || a[annotationSandboxID] == "" || a[annotationImageName] != testImage {
		t.Errorf("Annotations %v", a)
	}
	pod := sandboxConfig("vm")
	pod.Linux = &runtimeapi.LinuxPodSandboxConfig{
		Resources: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 1 << 30},
		Overhead:  &runtimeapi.LinuxContainerResources{CpuQuota: 25000, MemoryLimitInBytes: 128 << 20},
	}
	sa := s.sandboxAnnotations(pod)
	if sa[annotationContainerType] != "sandbox" || sa[annotationSandboxCPUQuota] != "225000" || sa[annotationSandboxMemory] != "1207959552" || sa[annotationSandboxUID] != "uid-vm" {
		t.Errorf("sandboxAnnotations %v", sa)
	}
	// Resources without overhead are the VM's size alone; a pod with neither gets no size.
	pod.Linux.Overhead = nil
	if sa := s.sandboxAnnotations(pod); sa[annotationSandboxCPUQuota] != "200000" || sa[annotationSandboxMemory] != "1073741824" {
		t.Errorf("sandboxAnnotations without overhead %v", sa)
	}
	pod.Linux = nil
	if sa := s.sandboxAnnotations(pod); sa[annotationSandboxMemory] != "" || sa[annotationSandboxCPUQuota] != "" || sa[annotationSandboxUID] != "uid-vm" {
		t.Errorf("sandboxAnnotations without resources %v", sa)
	}
}

// runsc behind the runc shim is not told to start a pod's containers in its pause container's
// gVisor sandbox (StartContainer hung there on Docker 29); every other runtime, the default
// one included, is, and with the default runtime set to runsc the default handler is not.
func TestRunscIsNotToldToGroupAPodsContainers(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.47")
	fake.AddRuntime("gvisor", "/usr/bin/runsc", "--network=host")
	fake.AddRuntime("kata-like", "/opt/kata/bin/kata-runtime")
	fake.AddRuntime("runsc-default", "/usr/local/bin/runsc")
	s := newTestService(t, fake, Options{})
	for _, tc := range []struct {
		handler, defaultRuntime string
		grouped                 bool
	}{{"gvisor", "", false}, {"kata-like", "", true}, {"", "", true}, {"", "runsc-default", false}} {
		if tc.defaultRuntime != "" {
			fake.SetDefaultRuntime(tc.defaultRuntime)
			s.runtimes = newRuntimeCache(fake, 0)
		}
		podCfg := sandboxConfig("p" + randomSuffix())
		pod, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: tc.handler})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: containerConfig("c"), SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		c, err := fake.InspectContainer(context.Background(), resp.ContainerId)
		if err != nil {
			t.Fatal(err)
		}
		a := c.HostConfig.Annotations
		_, typed := a[annotationContainerType]
		id, withID := a[annotationSandboxID]
		if typed != tc.grouped || withID != tc.grouped || (withID && id != pod.PodSandboxId) {
			t.Errorf("handler %q (default runtime %q): annotations %v, want grouping %v", tc.handler, tc.defaultRuntime, a, tc.grouped)
		}
		if a[annotationContainerName] != "c" || a[annotationSandboxName] != podCfg.Metadata.Name {
			t.Errorf("handler %q: pod identity missing from %v", tc.handler, a)
		}
	}
}

// A handler marked privileged-without-host-devices (for VM runtimes) gets every privilege
// but the node's devices; other handlers keep Docker's privileged mode.
func TestPrivilegedWithoutHostDevicesPerHandler(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{
		RuntimeHandlerAliases:        map[string]string{"vm": "kata"},
		PrivilegedWithoutHostDevices: map[string]bool{"vm": true},
	})
	privileged := func(handler string) *container.InspectResponse {
		t.Helper()
		podCfg := sandboxConfig("p" + randomSuffix())
		podCfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}}
		pod, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: handler})
		if err != nil {
			t.Fatal(err)
		}
		cfg := containerConfig("c")
		sc := securityCtx(cfg)
		sc.Privileged = true
		sc.Capabilities = &runtimeapi.Capability{DropCapabilities: []string{"NET_RAW"}}
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		sc.SelinuxOptions = &runtimeapi.SELinuxOption{Type: "spc_t"}
		sc.NoNewPrivs = true
		cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: "rwm"}}
		resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		c, err := fake.InspectContainer(context.Background(), resp.ContainerId)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	vm := privileged("vm")
	hc := vm.HostConfig
	if hc.Privileged {
		t.Error("privileged-without-host-devices handler: Docker's privileged mode would map every host device")
	}
	if !slices.Equal(hc.CapAdd, []string{"ALL"}) || len(hc.CapDrop) != 0 {
		t.Errorf("CapAdd %q CapDrop %q, want every capability", hc.CapAdd, hc.CapDrop)
	}
	wantOpts(t, vm, "no-new-privileges", "seccomp=unconfined", "apparmor=unconfined", "label=disable")
	if hc.MaskedPaths == nil || len(hc.MaskedPaths) != 0 || hc.ReadonlyPaths == nil || len(hc.ReadonlyPaths) != 0 {
		t.Errorf("MaskedPaths %#v ReadonlyPaths %#v, want empty lists (nil keeps Docker's masks)", hc.MaskedPaths, hc.ReadonlyPaths)
	}
	if len(hc.Devices) != 1 || hc.Devices[0].PathOnHost != "/dev/fuse" {
		t.Errorf("Devices %+v, want only the requested /dev/fuse", hc.Devices)
	}
	if hc.Runtime != "kata" {
		t.Errorf("runtime %q, want kata", hc.Runtime)
	}

	runc := privileged("")
	if !runc.HostConfig.Privileged || runc.HostConfig.MaskedPaths != nil {
		t.Errorf("default handler: Privileged %v MaskedPaths %#v, want Docker's privileged mode", runc.HostConfig.Privileged, runc.HostConfig.MaskedPaths)
	}
}

// A privileged container runs unconfined whatever seccomp profile it names (Docker 28+ would
// apply it; containerd ignores it), runtime default and localhost alike.
func TestPrivilegedContainerIgnoresItsSeccompProfile(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	profile := filepath.Join(t.TempDir(), "block-hostname.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*runtimeapi.SecurityProfile{
		{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile},
		{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	} {
		c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Privileged = true
			securityCtx(cfg).Seccomp = p
		})
		if err != nil {
			t.Fatal(err)
		}
		var seccomp []string
		for _, opt := range c.HostConfig.SecurityOpt {
			if strings.HasPrefix(opt, "seccomp=") {
				seccomp = append(seccomp, opt)
			}
		}
		if len(seccomp) != 1 || seccomp[0] != "seccomp=unconfined" {
			t.Errorf("privileged container with seccomp %v: security options %q, want only seccomp=unconfined", p.ProfileType, c.HostConfig.SecurityOpt)
		}
	}
}

// A localhost seccomp profile may be maxSeccompProfileSize bytes long, not one more.
func TestSeccompProfileSizeLimit(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	dir := t.TempDir()
	profile := `{"defaultAction": "SCMP_ACT_ERRNO"}`
	for size, ok := range map[int]bool{maxSeccompProfileSize: true, maxSeccompProfileSize + 1: false} {
		path := filepath.Join(dir, fmt.Sprintf("%d.json", size))
		if err := os.WriteFile(path, []byte(profile+strings.Repeat(" ", size-len(profile))), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
			securityCtx(cfg).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: path}
		})
		if ok && err != nil || !ok && status.Code(err) != codes.InvalidArgument {
			t.Errorf("a profile of %d bytes: %v", size, err)
		}
	}
}

// A localhost profile the kernel has not loaded fails at create with a message that says so;
// runc would fail the start with "apparmor failed to apply profile".
func TestApparmorProfileNotLoaded(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetSecurityOptions("name=apparmor", "name=seccomp,profile=default")
	s := newTestService(t, fake, Options{})
	profiles := s.apparmorProfiles()
	if err := os.MkdirAll(filepath.Dir(profiles), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(profiles, []byte("docker-default (enforce)\nmy-profile (complain)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		securityCtx(cfg).Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-profile"}
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOpts(t, c, "seccomp=unconfined", "apparmor=my-profile")
	_, err = createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		securityCtx(cfg).Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-prof"}
	})
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), `"my-prof" is not loaded`) {
		t.Errorf("error %v does not say the profile is not loaded", err)
	}
	// RuntimeDefault is Docker's docker-default, which Docker loads itself.
	if _, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		securityCtx(cfg).Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	}); err != nil {
		t.Error(err)
	}
}
