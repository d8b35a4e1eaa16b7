package core

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// cgroupV2Node makes s see a cgroup v2 node whose next started container's process is in
// /system.slice/docker-<id>.scope (Docker's systemd driver), with the files of a new cgroup.
// It returns a function that lays the cgroup out for container id, and the cgroup's path.
func cgroupV2Node(t *testing.T, s *Service, fake *libdocker.Fake) func(id string) string {
	t.Helper()
	sys, proc := t.TempDir(), t.TempDir()
	root := filepath.Join(sys, "fs", "cgroup")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	useStats(s, stats.Config{Host: stats.NewHost(sys, proc)})
	return func(id string) string {
		rel := "/system.slice/docker-" + id + ".scope"
		dir := filepath.Join(root, rel)
		write(filepath.Join(dir, "cgroup.controllers"), "cpuset cpu io memory pids\n")
		for file, v := range map[string]string{"memory.oom.group": "0", "memory.high": "max", "memory.min": "0", "memory.swap.max": "max"} {
			write(filepath.Join(dir, file), v+"\n")
		}
		write(filepath.Join(proc, strconv.Itoa(fake.NextPid()), "cgroup"), "0::"+rel+"\n")
		return dir
	}
}

func readCgroupFile(t *testing.T, dir, file string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// What Docker has no setting for (the kubelet's memory.oom.group, MemoryQoS, swap without a
// memory limit) is written into the container's cgroup once Docker has started it, and again
// by each update.
func TestCgroupV2FilesWrittenAfterStart(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	layOut := cgroupV2Node(t, s, fake)
	podID, podCfg := runPod(t, s, "v2", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		Unified: map[string]string{"memory.oom.group": "1", "memory.high": "100663296", "memory.min": "8388608", "memory.swap.max": "0"},
	}}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	dir := layOut(id)
	if got := readCgroupFile(t, dir, "memory.oom.group"); got != "0" {
		t.Fatalf("memory.oom.group %q before the start", got)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.oom.group": "1", "memory.high": "100663296", "memory.min": "8388608", "memory.swap.max": "0"} {
		if got := readCgroupFile(t, dir, file); got != want {
			t.Errorf("after the start %s = %q, want %q", file, got, want)
		}
	}
	// The CRI labels do not show ours.
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Status.Labels[cgroupV2Label]; ok {
		t.Errorf("CRI labels show %s", cgroupV2Label)
	}
	// An update may set a file back to the kernel's default.
	if _, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		Unified: map[string]string{"memory.high": "max", "memory.swap.max": "max"},
	}}); err != nil {
		t.Fatal(err)
	}
	if h, sw := readCgroupFile(t, dir, "memory.high"), readCgroupFile(t, dir, "memory.swap.max"); h != "max" || sw != "max" {
		t.Errorf("after the update memory.high %q, memory.swap.max %q; want max, max", h, sw)
	}
}

// A file the container's cgroup does not offer fails the start, and the container is stopped:
// runc fails a create whose unified map it cannot write.
func TestCgroupV2FileMissingFailsTheStart(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	layOut := cgroupV2Node(t, s, fake)
	podID, podCfg := runPod(t, s, "v2", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"hugetlb.2MB.max": "0"}}}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	layOut(resp.ContainerId)
	_, err = s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "hugetlb.2MB.max") || !strings.Contains(err.Error(), "cpuset cpu io memory pids") {
		t.Fatalf("start: %v; want FailedPrecondition naming the file and the cgroup's controllers", err)
	}
	inspect, err := fake.InspectContainer(ctx, resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	if inspect.State.Running {
		t.Error("the container still runs")
	}
}

// On a cgroup v1 node there are no cgroup v2 files to write: such a request is refused at
// create, not half applied. The kernel's defaults need nothing and pass.
func TestCgroupV2FilesRefusedOnCgroupV1(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "v1", "")
	for unified, want := range map[string]codes.Code{"memory.oom.group=1": codes.FailedPrecondition, "memory.oom.group=0": codes.OK, "memory.high=max": codes.OK} {
		k, v, _ := strings.Cut(unified, "=")
		cfg := containerConfig("c-" + strings.ReplaceAll(k, ".", "-") + "-" + v)
		cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: map[string]string{k: v}}}
		_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != want {
			t.Errorf("%s on cgroup v1: %v, want %v", unified, err, want)
		}
	}
}

// A runtime that keeps the container's process in the pod's cgroup has no cgroup of the
// container: nothing is written (the pod's cgroup is not the container's), and the start goes on.
func TestCgroupV2FilesNotWrittenOutsideTheContainersCgroup(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	layOut := cgroupV2Node(t, s, fake)
	podID, podCfg := runPod(t, s, "v2", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.oom.group": "1"}}}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	// The process is in another container's cgroup.
	dir := layOut("someone-else")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if got := readCgroupFile(t, dir, "memory.oom.group"); got != "0" {
		t.Errorf("another cgroup's memory.oom.group is %q", got)
	}
}
