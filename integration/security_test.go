//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// execIn runs cmd in a container through ExecSync and returns its output and exit code.
func execIn(t testing.TB, d *Daemon, id string, cmd ...string) (stdout, stderr string, code int32) {
	t.Helper()
	resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync %v in %s: %v", cmd, id, err)
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode
}

// procStatus reads one field of /proc/self/status of a process exec'd in the container.
func procStatus(t testing.TB, d *Daemon, id, field string) string {
	t.Helper()
	out, _, code := execIn(t, d, id, "cat", "/proc/self/status")
	if code != 0 {
		t.Fatalf("cat /proc/self/status exited %d", code)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(field) + `:\s*(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in /proc/self/status:\n%s", field, out)
	}
	return m[1]
}

// hasCap reports whether capability number bit is in a hex capability mask.
func hasCap(t testing.TB, mask string, bit uint) bool {
	t.Helper()
	v, err := strconv.ParseUint(mask, 16, 64)
	if err != nil {
		t.Fatalf("capability mask %q: %v", mask, err)
	}
	return v&(1<<bit) != 0
}

const (
	capNetAdmin = 12
	capNetRaw   = 13
	capChown    = 0
)

// TestSecurityContextSeenFromInside checks each security field where it matters: in the
// process the kubelet's container runs, read from inside the container.
func TestSecurityContextSeenFromInside(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=") // Docker's bridge: these tests are not about networking
	podCfg := newPodConfig(t, "security")
	podCfg.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1"}
	sandboxID := runPod(t, d, podCfg, "")

	profile := filepath.Join(t.TempDir(), "block-chmod.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod","fchmodat"],"action":"SCMP_ACT_ERRNO"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, name string, mutate func(cfg *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext)) string {
		t.Helper()
		cfg := containerConfig(name, sleeper)
		mutate(cfg, cfg.Linux.SecurityContext)
		id := createContainer(t, d, sandboxID, podCfg, cfg)
		startContainer(t, d, id)
		return id
	}

	t.Run("seccomp", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			profile *runtimeapi.SecurityProfile
			want    string
		}{
			{"seccomp-nil", nil, "0"},
			{"seccomp-unconfined", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, "0"},
			{"seccomp-default", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, "2"},
			{"seccomp-localhost", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}, "2"},
		} {
			id := run(t, tc.name, func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
				sc.Seccomp = tc.profile
			})
			if got := procStatus(t, d, id, "Seccomp"); got != tc.want {
				t.Errorf("%s: Seccomp %s, want %s", tc.name, got, tc.want)
			}
			_, stderr, code := execIn(t, d, id, "chmod", "400", "/tmp")
			blocked := code != 0 && strings.Contains(stderr, "Operation not permitted")
			if blocked != (tc.name == "seccomp-localhost") {
				t.Errorf("%s: chmod exit %d stderr %q; only the localhost profile blocks it", tc.name, code, stderr)
			}
		}
	})

	t.Run("capabilities and no_new_privs", func(t *testing.T) {
		id := run(t, "caps", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"NET_RAW", "CHOWN"}}
			sc.NoNewPrivs = true
		})
		eff := procStatus(t, d, id, "CapEff")
		if !hasCap(t, eff, capNetAdmin) || hasCap(t, eff, capNetRaw) || hasCap(t, eff, capChown) {
			t.Errorf("CapEff %s: want NET_ADMIN, without NET_RAW and CHOWN", eff)
		}
		if got := procStatus(t, d, id, "NoNewPrivs"); got != "1" {
			t.Errorf("NoNewPrivs %s, want 1", got)
		}
		id = run(t, "drop-all", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Capabilities = &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}
		})
		if eff, bnd := procStatus(t, d, id, "CapEff"), procStatus(t, d, id, "CapBnd"); eff != "0000000000000000" || bnd != "0000000000000000" {
			t.Errorf("drop ALL: CapEff %s CapBnd %s, want none", eff, bnd)
		}
		if got := procStatus(t, d, id, "NoNewPrivs"); got != "0" {
			t.Errorf("NoNewPrivs %s without no_new_privs, want 0", got)
		}
	})

	t.Run("user and groups", func(t *testing.T) {
		id := run(t, "ids", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: 1001}
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: 1002}
			sc.SupplementalGroups = []int64{1234, 5678}
		})
		out, _, _ := execIn(t, d, id, "id", "-u")
		if strings.TrimSpace(out) != "1001" {
			t.Errorf("id -u = %q", out)
		}
		out, _, _ = execIn(t, d, id, "id", "-g")
		if strings.TrimSpace(out) != "1002" {
			t.Errorf("id -g = %q", out)
		}
		out, _, _ = execIn(t, d, id, "id", "-G")
		if groups := strings.Fields(out); !slices.Contains(groups, "1234") || !slices.Contains(groups, "5678") {
			t.Errorf("id -G = %q, want 1234 and 5678", out)
		}
		id = run(t, "username", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.RunAsUsername = "nobody"
		})
		if out, _, _ := execIn(t, d, id, "id", "-nu"); strings.TrimSpace(out) != "nobody" {
			t.Errorf("id -nu = %q", out)
		}
	})

	t.Run("masked, read-only paths and root", func(t *testing.T) {
		// Not /bin/ls as critest does: this image's applets are symlinks to busybox, and a
		// mask over a symlink hides busybox itself.
		id := run(t, "paths", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.MaskedPaths = []string{"/etc/passwd", "/var"}
			sc.ReadonlyPaths = []string{"/tmp"}
		})
		if out, _, code := execIn(t, d, id, "sh", "-c", "cat /etc/passwd; ls -A /var"); code != 0 || out != "" {
			t.Errorf("masked /etc/passwd and /var show %q (exit %d), want nothing", out, code)
		}
		if _, stderr, code := execIn(t, d, id, "touch", "/tmp/x"); code == 0 || !strings.Contains(stderr, "Read-only file system") {
			t.Errorf("touch in read-only /tmp: exit %d stderr %q", code, stderr)
		}
		if _, _, code := execIn(t, d, id, "touch", "/x"); code != 0 {
			t.Errorf("touch /x in a writable root: exit %d", code)
		}
		id = run(t, "rorootfs", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.ReadonlyRootfs = true
		})
		if _, stderr, code := execIn(t, d, id, "touch", "/x"); code == 0 || !strings.Contains(stderr, "Read-only file system") {
			t.Errorf("touch /x in a read-only root: exit %d stderr %q", code, stderr)
		}
		if out, _, _ := execIn(t, d, id, "cat", "/etc/passwd"); !strings.Contains(out, "root:") {
			t.Errorf("/etc/passwd of an unmasked container: %q", out)
		}
	})

	t.Run("sysctls, resources and devices", func(t *testing.T) {
		id := run(t, "res", func(cfg *runtimeapi.ContainerConfig, _ *runtimeapi.LinuxContainerSecurityContext) {
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20}
			cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/mynull", Permissions: "rw"}}
		})
		for file, want := range map[string]string{
			"/proc/sys/kernel/shm_rmid_forced":            "1",
			"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "50000",
			"/sys/fs/cgroup/cpu/cpu.cfs_period_us":        "100000",
			"/sys/fs/cgroup/cpu/cpu.shares":               "512",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": strconv.Itoa(64 << 20),
		} {
			if out, stderr, _ := execIn(t, d, id, "cat", file); strings.TrimSpace(out) != want {
				t.Errorf("%s = %q (%s), want %s", file, out, stderr, want)
			}
		}
		if _, _, code := execIn(t, d, id, "sh", "-c", "test -c /dev/mynull && echo x > /dev/mynull"); code != 0 {
			t.Errorf("/dev/mynull is not a writable character device in the container (exit %d)", code)
		}
	})

	t.Run("pid namespace of a target container", func(t *testing.T) {
		target := run(t, "target", func(cfg *runtimeapi.ContainerConfig, _ *runtimeapi.LinuxContainerSecurityContext) {
			cfg.Command = []string{"sh", "-c", "exec sleep 4242"}
		})
		id := run(t, "debugger", func(_ *runtimeapi.ContainerConfig, sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: target}
		})
		if out, _, _ := execIn(t, d, id, "cat", "/proc/1/cmdline"); !strings.Contains(out, "4242") {
			t.Errorf("pid 1 of the debugger is %q, want the target's sleep 4242", out)
		}
	})
}

// TestPrivilegedAndAllCapabilitiesReachDocker checks what Docker records for the requests this
// VM cannot run (it lacks CAP_SYS_RESOURCE: see TESTING.md), and that the refused fields fail
// with a code and leave nothing behind.
func TestPrivilegedAndAllCapabilitiesReachDocker(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=") // Docker's bridge: these tests are not about networking
	podCfg := newPodConfig(t, "privileged")
	podCfg.Linux.SecurityContext.Privileged = true // the pod may run privileged containers
	sandboxID := runPod(t, d, podCfg, "")
	if c, err := suite.docker.ContainerInspect(t.Context(), sandboxID); err != nil {
		t.Fatal(err)
	} else if c.HostConfig.Privileged {
		t.Error("the pause container of a privileged pod is privileged; it needs no privileges")
	}

	cfg := containerConfig("priv", sleeper)
	cfg.Linux.SecurityContext.Privileged = true
	cfg.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore"}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.HostConfig.Privileged || len(c.HostConfig.MaskedPaths) != 0 {
		t.Errorf("privileged: Privileged %v MaskedPaths %q; want Docker's privileged mode with nothing masked", c.HostConfig.Privileged, c.HostConfig.MaskedPaths)
	}

	cfg = containerConfig("allcaps", sleeper)
	cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}
	id = createContainer(t, d, sandboxID, podCfg, cfg)
	if c, err = suite.docker.ContainerInspect(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.HostConfig.CapAdd, []string{"ALL"}) {
		t.Errorf("CapAdd %q, want [ALL]", c.HostConfig.CapAdd)
	}

	before := len(podContainers(t, podCfg.Metadata))
	for name, mutate := range map[string]func(*runtimeapi.LinuxContainerSecurityContext){
		"ambient": func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}
		},
		"strict-groups": func(sc *runtimeapi.LinuxContainerSecurityContext) {
			sc.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		},
	} {
		cfg = containerConfig(name, sleeper)
		mutate(cfg.Linux.SecurityContext)
		_, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
		wantCode(t, err, codes.Unimplemented, "Docker")
	}
	if after := len(podContainers(t, podCfg.Metadata)); after != before {
		t.Errorf("%d containers after refused creates, want %d", after, before)
	}
}

// TestPrivilegedWithoutHostDevices checks what Docker records for a privileged container on a
// handler marked --privileged-without-host-devices: every privilege but the node's devices.
// This VM cannot start it (CapAdd ALL needs CAP_SYS_RESOURCE, see TESTING.md).
func TestPrivilegedWithoutHostDevices(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=", "--privileged-without-host-devices=wrapped")
	podCfg := newPodConfig(t, "privnodev")
	podCfg.Linux.SecurityContext.Privileged = true
	sandboxID := runPod(t, d, podCfg, "wrapped")

	cfg := containerConfig("priv", sleeper)
	cfg.Linux.SecurityContext.Privileged = true
	cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/extra-null", Permissions: "rwm"}}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	if hc.Privileged || hc.Runtime != "wrapped" {
		t.Errorf("Privileged %v Runtime %q, want false (no host devices) on wrapped", hc.Privileged, hc.Runtime)
	}
	if !slices.Equal(hc.CapAdd, []string{"ALL"}) {
		t.Errorf("CapAdd %q, want [ALL]", hc.CapAdd)
	}
	for _, want := range []string{"seccomp=unconfined", "apparmor=unconfined", "label=disable"} {
		if !slices.Contains(hc.SecurityOpt, want) {
			t.Errorf("SecurityOpt %q lacks %s", hc.SecurityOpt, want)
		}
	}
	// Docker fills in its default masks when the lists are null; empty lists unmask /proc.
	if hc.MaskedPaths == nil || len(hc.MaskedPaths) != 0 || hc.ReadonlyPaths == nil || len(hc.ReadonlyPaths) != 0 {
		t.Errorf("MaskedPaths %#v ReadonlyPaths %#v, want empty lists", hc.MaskedPaths, hc.ReadonlyPaths)
	}
	if len(hc.Devices) != 1 || hc.Devices[0].PathInContainer != "/dev/extra-null" {
		t.Errorf("Devices %+v, want only the requested one", hc.Devices)
	}

	// The same request on a handler not in the list is Docker's privileged mode.
	plainPod := newPodConfig(t, "privplain")
	plainPod.Linux.SecurityContext.Privileged = true
	plainSandbox := runPod(t, d, plainPod, "")
	id = createContainer(t, d, plainSandbox, plainPod, cfg)
	if c, err = suite.docker.ContainerInspect(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if !c.HostConfig.Privileged || len(c.HostConfig.CapAdd) != 0 {
		t.Errorf("default handler: Privileged %v CapAdd %q, want Docker's privileged mode", c.HostConfig.Privileged, c.HostConfig.CapAdd)
	}

	// An unprivileged container on the marked handler keeps Docker's masks.
	cfg = containerConfig("plain", sleeper)
	id = createContainer(t, d, sandboxID, podCfg, cfg)
	if c, err = suite.docker.ContainerInspect(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.Privileged || len(c.HostConfig.MaskedPaths) == 0 || len(c.HostConfig.CapAdd) != 0 {
		t.Errorf("unprivileged container: Privileged %v MaskedPaths %q CapAdd %q, want Docker's defaults", c.HostConfig.Privileged, c.HostConfig.MaskedPaths, c.HostConfig.CapAdd)
	}
}

// TestShmSizeAnnotation sizes the pod's /dev/shm from its annotation; every container of the
// pod sees the sandbox's tmpfs.
func TestShmSizeAnnotation(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "shm")
	podCfg.Annotations = map[string]string{"io.cri-dockerd.shm-size": "96Mi"}
	sandboxID := runPod(t, d, podCfg, "")
	id := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	startContainer(t, d, id)
	out, _, code := execIn(t, d, id, "grep", " /dev/shm ", "/proc/mounts")
	if code != 0 || !strings.Contains(out, "size=98304k") {
		t.Errorf("/dev/shm mount %q (exit %d), want a 96Mi tmpfs (size=98304k)", out, code)
	}

	bad := newPodConfig(t, "shmbad")
	bad.Annotations = map[string]string{"io.cri-dockerd.shm-size": "lots"}
	_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: bad})
	wantCode(t, err, codes.InvalidArgument, "io.cri-dockerd.shm-size")
	if left := podContainers(t, bad.Metadata); len(left) != 0 {
		t.Errorf("a refused pod left %d containers", len(left))
	}
}

// TestUpdateContainerResourcesLive resizes a running container and reads its cgroup files.
func TestUpdateContainerResourcesLive(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=") // Docker's bridge: these tests are not about networking
	podCfg := newPodConfig(t, "resize")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("app", sleeper)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 256, MemoryLimitInBytes: 64 << 20}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id)

	_, err := d.Runtime.UpdateContainerResources(t.Context(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 150000, CpuShares: 1536, MemoryLimitInBytes: 256 << 20, MemorySwapLimitInBytes: 256 << 20,
	}})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":               "150000",
		"/sys/fs/cgroup/cpu/cpu.shares":                     "1536",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes":       strconv.Itoa(256 << 20),
		"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": strconv.Itoa(256 << 20),
	} {
		if out, stderr, _ := execIn(t, d, id, "cat", file); strings.TrimSpace(out) != want {
			t.Errorf("after update %s = %q (%s), want %s", file, out, stderr, want)
		}
	}
	// An update that says nothing about swap keeps the container's (now none) on top of the new limit.
	if _, err := d.Runtime.UpdateContainerResources(t.Context(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20}}); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := execIn(t, d, id, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); strings.TrimSpace(out) != strconv.Itoa(512<<20) {
		t.Errorf("memory limit after the second update: %q", out)
	}
	_, err = d.Runtime.UpdateContainerResources(t.Context(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "0123456789ab0123", Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
	wantCode(t, err, codes.NotFound)
}

// TestMountPropagation checks the three propagation modes on a real mount: a mount made on the
// host after the start reaches rslave and rshared binds but not a private one, and a mount made
// inside a container with an rshared bind reaches the host. (critest's propagation specs need a
// privileged container, which this VM cannot run; CAP_SYS_ADMIN is enough here.)
func TestMountPropagation(t *testing.T) {
	src := sharedMountDir(t, "prop")

	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "propagation")
	sandboxID := runPod(t, d, podCfg, "")
	ids := map[runtimeapi.MountPropagation]string{}
	for _, p := range []runtimeapi.MountPropagation{runtimeapi.MountPropagation_PROPAGATION_PRIVATE, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL} {
		cfg := containerConfig(strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "PROPAGATION_")), "_", "-"), sleeper)
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: src, ContainerPath: "/mnt/prop", Propagation: p}}
		if p == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL {
			cfg.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"SYS_ADMIN"}}
		}
		ids[p] = createContainer(t, d, sandboxID, podCfg, cfg)
		startContainer(t, d, ids[p])
	}
	c, err := suite.docker.ContainerInspect(t.Context(), ids[runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER])
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Mounts) != 1 || c.Mounts[0].Propagation != "rslave" {
		t.Errorf("host-to-container mount recorded as %+v, want rslave", c.Mounts)
	}

	// Host to container.
	fromHost := filepath.Join(src, "from-host")
	if err := os.Mkdir(fromHost, 0o755); err != nil {
		t.Fatal(err)
	}
	runOrFail(t, "mount", "-t", "tmpfs", "tmpfs", fromHost)
	if err := os.WriteFile(filepath.Join(fromHost, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[runtimeapi.MountPropagation]bool{
		runtimeapi.MountPropagation_PROPAGATION_PRIVATE:           false,
		runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER: true,
		runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:     true,
	} {
		_, _, code := execIn(t, d, ids[p], "test", "-f", "/mnt/prop/from-host/hello")
		if got := code == 0; got != want {
			t.Errorf("%v: the host's later mount is visible: %v, want %v", p, got, want)
		}
	}

	// Container to host, with rshared only.
	if err := os.Mkdir(filepath.Join(src, "from-container"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := execIn(t, d, ids[runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL], "sh", "-c", "mount -t tmpfs tmpfs /mnt/prop/from-container && touch /mnt/prop/from-container/made-inside"); code != 0 {
		t.Fatalf("mount inside the rshared container: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(src, "from-container", "made-inside")); err != nil {
		t.Errorf("a mount made in the rshared container does not reach the host: %v", err)
	}
	if _, _, code := execIn(t, d, ids[runtimeapi.MountPropagation_PROPAGATION_PRIVATE], "test", "-f", "/mnt/prop/from-container/made-inside"); code == 0 {
		t.Error("a mount made in the rshared container reached the private one")
	}
}

// TestRecursiveReadOnlyMount: Docker 25 (API 1.44) makes a bind read-only with its submounts;
// older engines, like this machine's 20.10, are refused with the reason, and Status says so.
func TestRecursiveReadOnlyMount(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "rro")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("app", sleeper)
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data", Readonly: true, RecursiveReadOnly: true}}
	st, err := d.Runtime.Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	supported := false
	for _, h := range st.RuntimeHandlers {
		if h.Name == "" {
			supported = h.Features.GetRecursiveReadOnlyMounts()
		}
	}
	resp, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
	if !supported {
		wantCode(t, err, codes.Unimplemented, "Docker 25")
		return
	}
	if err != nil {
		t.Fatalf("recursive read-only mount where Status says it is supported: %v", err)
	}
	c, err := suite.docker.ContainerInspect(t.Context(), resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HostConfig.Mounts) != 1 || c.HostConfig.Mounts[0].BindOptions == nil || !c.HostConfig.Mounts[0].BindOptions.ReadOnlyForceRecursive {
		t.Errorf("mounts %+v, want a recursively read-only bind", c.HostConfig.Mounts)
	}
}

// A privileged container runs without a seccomp filter whatever profile it names: here one
// that blocks sethostname (critest's "runtime should ignore a seccomp profile that blocks
// setting hostname when privileged"). Docker 28+ applies an explicit profile to privileged
// containers, Docker 20.10 did not. This VM's runc 1.1 (Debian's 20.10) cannot start
// privileged containers at all; runc 1.5 (Docker 29's) can.
func TestPrivilegedContainerIgnoresItsSeccompProfile(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "block-hostname.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "privseccomp")
	podCfg.Linux.SecurityContext.Privileged = true
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("priv", sleeper)
	cfg.Linux.SecurityContext.Privileged = true
	cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	if _, err := d.Runtime.StartContainer(t.Context(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		if strings.Contains(err.Error(), "unable to apply caps") {
			t.Skipf("this engine's runtime cannot start privileged containers on this VM: %v", err)
		}
		t.Fatal(err)
	}
	if out, stderr, code := execIn(t, d, id, "hostname", "crid-priv"); code != 0 {
		t.Errorf("sethostname in a privileged container: exit %d %s%s; want the seccomp profile ignored", code, out, stderr)
	}
}

// sharedMountDir is a new directory that is a shared mount of its own, until the test ends:
// rslave and rshared binds need a shared source, and the host's / may be private.
func sharedMountDir(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	runOrFail(t, "mount", "--bind", src, src)
	t.Cleanup(func() { exec.Command("umount", "-R", "-l", src).Run() })
	runOrFail(t, "mount", "--make-rshared", src)
	return src
}

// runOrFail runs a command and fails the test with its output when it fails.
func runOrFail(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
}
