package core

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/stats/runscstats"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
)

// A gVisor pod's process count is its sandboxes' tasks as runsc reports them, not the threads
// of the Sentry and gofer that the host's pids cgroup (Docker's stats) counts; a runc pod's
// stays Docker's.
func TestGVisorPodsProcessCountIsTheSandboxesTasks(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("gvisor", "/usr/bin/runsc", "--network=host")
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	proc := t.TempDir()
	tasks := map[string]uint64{}
	var ran [][]string
	useStats(s, stats.Config{Runsc: &runscstats.Reader{Proc: proc, Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, append([]string{name}, args...))
		id := args[len(args)-1]
		return []byte(`{"type":"stats","id":"` + id + `","data":{"pids":{"current":` + strconv.FormatUint(tasks[id], 10) + `}}}`), nil
	}}})
	// Each container's State.Pid is a runsc sandbox process with the shim's --root.
	sandboxProcess := func(id string) {
		c, err := fake.InspectContainer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(proc, strconv.Itoa(c.State.Pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte("runsc-sandbox\x00--root=/run/docker/runtime-runc/moby\x00boot\x00"+id+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := fake.SetStats(id, container.StatsResponse{PidsStats: container.PidsStats{Current: 52}}); err != nil {
			t.Fatal(err)
		}
	}

	count := func(handler string) uint64 {
		podCfg := sandboxConfig("gv" + randomSuffix())
		pod, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: handler})
		if err != nil {
			t.Fatal(err)
		}
		ctr := startedContainer(t, s, pod.PodSandboxId, podCfg, "c")
		tasks[pod.PodSandboxId], tasks[ctr] = 1, 2
		sandboxProcess(pod.PodSandboxId)
		sandboxProcess(ctr)
		resp, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod.PodSandboxId})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Stats.GetLinux().GetProcess().GetProcessCount().GetValue()
	}
	if n := count("gvisor"); n != 3 {
		t.Errorf("gVisor pod: %d processes, want 3 (1 in the pause sandbox, 2 in the container's)", n)
	}
	if len(ran) != 2 || ran[0][1] != "--root=/run/docker/runtime-runc/moby" || ran[0][0] != "/usr/bin/runsc" {
		t.Errorf("runsc runs %q, want two of /usr/bin/runsc --root=/run/docker/runtime-runc/moby events --stats ID", ran)
	}
	ran = nil
	if n := count(""); n != 104 {
		t.Errorf("runc pod: %d processes, want Docker's 2×52", n)
	}
	if len(ran) != 0 {
		t.Errorf("runsc ran for a runc pod: %q", ran)
	}
}
