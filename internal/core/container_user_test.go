package core

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// ContainerStatus.user is what the first process runs with, as /proc says, and stays once the
// container has exited; a process that is not the container's own (a VM runtime's guest PID)
// gives none.
func TestContainerStatusUser(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	layOut := cgroupV2Node(t, s, fake)
	proc := s.stats.Host().Proc()
	podID, podCfg := runPod(t, s, "p", "")
	start := func(name string, ownCgroup bool) string {
		t.Helper()
		resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig(name), SandboxConfig: podCfg})
		if err != nil {
			t.Fatal(err)
		}
		pid := strconv.Itoa(fake.NextPid())
		layOut(resp.ContainerId) // the next pid's cgroup names the container
		if !ownCgroup {
			if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte("0::/init.scope\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		status := "Name:\tsleep\nUid:\t1000\t1000\t1000\t1000\nGid:\t3000\t3000\t3000\t3000\nGroups:\t10 3000 \n"
		if err := os.WriteFile(filepath.Join(proc, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
			t.Fatal(err)
		}
		return resp.ContainerId
	}
	user := func(id string) *runtimeapi.LinuxContainerUser {
		t.Helper()
		st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return st.Status.GetUser().GetLinux()
	}
	want := &runtimeapi.LinuxContainerUser{Uid: 1000, Gid: 3000, SupplementalGroups: []int64{10, 3000}}
	id := start("c", true)
	if got := user(id); got == nil || got.Uid != want.Uid || got.Gid != want.Gid || !reflect.DeepEqual(got.SupplementalGroups, want.SupplementalGroups) {
		t.Fatalf("running: user %v, want %v", got, want)
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if got := user(id); got == nil || got.Uid != want.Uid {
		t.Errorf("exited: user %v, want %v", got, want)
	}
	other := start("vm", false)
	if got := user(other); got != nil {
		t.Errorf("a PID in no cgroup of the container: user %v, want none", got)
	}
	// Removed: forgotten, once Docker's destroy event is in.
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, kept := s.users.Get(id); kept; _, kept = s.users.Get(id) {
		if time.Now().After(deadline) {
			t.Fatal("the user of a removed container is kept")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
