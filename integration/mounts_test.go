//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/versions"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Read-only mounts have containerd's semantics on every engine, as the container's own
// mountinfo shows: readonly makes the mount read-only and leaves its submounts as they are;
// recursive_read_only makes the submounts read-only too (Docker 25+, else refused), and is
// refused without readonly or with a propagation other than private. Each propagation keeps
// its mode. The host directory holds a tmpfs submount.
func TestReadOnlyMountsAsContainerd(t *testing.T) {
	// A shared mount of its own (rslave and rshared need one), with a tmpfs below.
	src := sharedMountDir(t, "ro")
	sub := filepath.Join(src, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	runOrFail(t, "mount", "-t", "tmpfs", "tmpfs", sub)

	d := StartDaemon(t)
	podCfg := newPodConfig(t, "romounts")
	sandboxID := runPod(t, d, podCfg, "")
	rroSupported := versions.GreaterThanOrEqualTo(suite.docker.ClientVersion(), "1.44")

	const (
		private = runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		slave   = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		shared  = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	)
	for _, tc := range []struct {
		ro, rro bool
		prop    runtimeapi.MountPropagation
		// what mountinfo must say of /mnt/ro and /mnt/ro/sub
		top, below string
		// the optional field that marks the propagation ("" for private)
		tag string
	}{
		{false, false, private, "rw", "rw", ""},
		{true, false, private, "ro", "rw", ""},
		{true, false, slave, "ro", "rw", "master:"},
		{true, false, shared, "ro", "rw", "shared:"},
		{false, false, shared, "rw", "rw", "shared:"},
		{true, true, private, "ro", "ro", ""},
		{false, false, slave, "rw", "rw", "master:"},
		// refused, as containerd does: recursive read-only needs readonly and private propagation
		{false, true, private, "", "", ""},
		{true, true, slave, "", "", ""},
	} {
		name := fmt.Sprintf("readonly=%v recursive=%v %s", tc.ro, tc.rro, tc.prop)
		t.Run(name, func(t *testing.T) {
			cfg := containerConfig(fmt.Sprintf("ro-%v-%v-%d", tc.ro, tc.rro, tc.prop), sleeper)
			cfg.Mounts = []*runtimeapi.Mount{{HostPath: src, ContainerPath: "/mnt/ro", Readonly: tc.ro, RecursiveReadOnly: tc.rro, Propagation: tc.prop, SelinuxRelabel: true}}
			if tc.top == "" {
				_, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
				wantCode(t, err, codes.InvalidArgument, "recursive_read_only needs")
				return
			}
			if tc.rro && !rroSupported {
				_, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
				wantCode(t, err, codes.Unimplemented, "Docker 25")
				return
			}
			id := createContainer(t, d, sandboxID, podCfg, cfg)
			startContainer(t, d, id)
			out, _, code := execIn(t, d, id, "cat", "/proc/self/mountinfo")
			if code != 0 {
				t.Fatalf("cat mountinfo: exit %d", code)
			}
			for target, want := range map[string]string{"/mnt/ro": tc.top, "/mnt/ro/sub": tc.below} {
				line := mountinfoLine(out, target)
				if line == "" {
					t.Errorf("%s is not a mount in the container:\n%s", target, out)
					continue
				}
				fields := strings.Fields(line)
				opts := strings.Split(fields[5], ",")
				if opts[0] != want {
					t.Errorf("%s mounted %s, want %s: %s", target, opts[0], want, line)
				}
				if target == "/mnt/ro" {
					optional := strings.Join(fields[6:indexOf(fields, "-")], " ")
					marked := strings.Contains(optional, "shared:") || strings.Contains(optional, "master:")
					if (tc.tag == "" && marked) || (tc.tag != "" && !strings.Contains(optional, tc.tag)) {
						t.Errorf("%s: propagation fields %q, want %q", target, optional, tc.tag)
					}
				}
			}
		})
	}
}

// mountinfoLine is the line of a mountinfo whose mount point is target.
func mountinfoLine(mountinfo, target string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == target {
			return line
		}
	}
	return ""
}

func indexOf(fields []string, s string) int {
	for i, f := range fields {
		if f == s {
			return i
		}
	}
	return len(fields)
}

// A container_path that looks like a bind spec's options is a path: "/mnt/x:rshared" is a
// private mount at exactly that path (as a bind spec it was a bidirectional mount at /mnt/x, in
// a pod that is not privileged). A relative host_path, which Docker would take for a volume's
// name, is refused; a missing host path is created as a directory, as containerd does, on
// Docker 20.10 too (whose mounts have no CreateMountpoint).
func TestMountPathsAreNotOptions(t *testing.T) {
	src := sharedMountDir(t, "opts") // shared, so that an rshared mount of it could be made
	missing := filepath.Join(t.TempDir(), "made", "here")

	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "mountpaths")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("colon", sleeper)
	cfg.Mounts = []*runtimeapi.Mount{
		{HostPath: src, ContainerPath: "/mnt/x:rshared"},
		{HostPath: missing, ContainerPath: "/mnt/made"},
	}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id)
	out, _, code := execIn(t, d, id, "cat", "/proc/self/mountinfo")
	if code != 0 {
		t.Fatalf("cat mountinfo: exit %d", code)
	}
	if line := mountinfoLine(out, "/mnt/x"); line != "" {
		t.Errorf("a mount at /mnt/x: the path's tail was read as options: %s", line)
	}
	line := mountinfoLine(out, "/mnt/x:rshared")
	if line == "" {
		t.Fatalf("/mnt/x:rshared is not a mount in the container:\n%s", out)
	}
	fields := strings.Fields(line)
	if optional := strings.Join(fields[6:indexOf(fields, "-")], " "); strings.Contains(optional, "shared:") || strings.Contains(optional, "master:") {
		t.Errorf("/mnt/x:rshared has propagation fields %q, want a private mount: %s", optional, line)
	}
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("the missing host path after the create: %v, %v; want a directory 0755", fi, err)
	}
	if mountinfoLine(out, "/mnt/made") == "" {
		t.Errorf("/mnt/made is not a mount in the container:\n%s", out)
	}

	cfg = containerConfig("relative", sleeper)
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: "data", ContainerPath: "/data"}}
	_, err := d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
	wantCode(t, err, codes.InvalidArgument, "host_path")
}
