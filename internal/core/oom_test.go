package core

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"

	"github.com/docker/docker/api/types/system"
)

// Negative oom_score_adj values are refused on a rootless Docker, and where this process's
// capability bounding set lacks CAP_SYS_RESOURCE; allowed otherwise.
func TestNegativeOOMScoreRefusal(t *testing.T) {
	if got := NegativeOOMScoreRefusal(system.Info{SecurityOptions: []string{"name=seccomp,profile=builtin", "name=rootless"}}); got != "Docker runs rootless" {
		t.Errorf("rootless: %q", got)
	}
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	var bnd uint64
	for sc := bufio.NewScanner(strings.NewReader(string(raw))); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			bnd, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	want := ""
	if bnd&(1<<capSysResource) == 0 {
		want = "this node's capability bounding set lacks CAP_SYS_RESOURCE"
	}
	if got := NegativeOOMScoreRefusal(system.Info{SecurityOptions: []string{"name=seccomp,profile=builtin"}}); got != want {
		t.Errorf("CapBnd %x: refusal %q, want %q", bnd, got, want)
	}
}

// Docker 20.10 loses a race when containerd's TaskOOM comes after the task's exit: OOMKilled
// stays false and only its oom event tells. The reason is OOMKilled all the same, once the
// event is in; a plain 137 (a SIGKILL) stays Error.
func TestOOMKilledReasonFromDockersOOMEvent(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	podID, podCfg := runPod(t, s, "oom", "")
	reason := func(id string) string { return containerReason(t, s, id) }
	for _, recorded := range []bool{true, false} {
		id := startedContainer(t, s, podID, podCfg, fmt.Sprintf("oom-%v", recorded))
		if err := fake.OOMKillContainer(id, recorded); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return reason(id) == "OOMKilled" },
			"OOMKilled recorded by Docker %v: reason %q, want OOMKilled", recorded, reason(id))
	}
	killed := startedContainer(t, s, podID, podCfg, "killed")
	if err := fake.ExitContainer(killed, 137); err != nil {
		t.Fatal(err)
	}
	// The events of the others are in by now; this one's die is too once its status is exited.
	time.Sleep(50 * time.Millisecond)
	if got := reason(killed); got != "Error" {
		t.Errorf("a 137 without an oom event: reason %q, want Error", got)
	}
}

// A kill the shim did not see (before it watched the cgroup: gVisor's sandbox outgrowing its
// limit while it starts) leaves Docker without an oom event; the kernel's record of it tells.
func TestOOMKilledReasonFromTheKernelsRecord(t *testing.T) {
	fake := libdocker.NewFake()
	kmsg, writeKmsg := io.Pipe()
	t.Cleanup(func() { writeKmsg.Close() })
	s := newTestService(t, fake, Options{KernelLog: kmsg})
	t.Cleanup(s.Close)
	podID, podCfg := runPod(t, s, "oom", "")
	id := startedContainer(t, s, podID, podCfg, "killed-at-start")
	if err := fake.ExitContainer(id, 137); err != nil {
		t.Fatal(err)
	}
	record := "6,2451,255612345,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=" + id +
		",mems_allowed=0,oom_memcg=/docker/" + id + ",task_memcg=/docker/" + id + ",task=exe,pid=4018,uid=0\n"
	if _, err := writeKmsg.Write([]byte(record)); err != nil {
		t.Fatal(err)
	}
	reason := func() string { return containerReason(t, s, id) }
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return reason() == "OOMKilled" },
		"after the kernel's record: reason %q, want OOMKilled", reason())
}

// containerReason is ContainerStatus's reason for container id.
func containerReason(t *testing.T, s *Service, id string) string {
	t.Helper()
	resp, err := s.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status.Reason
}
