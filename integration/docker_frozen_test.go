//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// With dockerd frozen (SIGSTOP: its socket accepts, nothing answers), Status answers within its
// own bound of about 2 s, not the caller's deadline: RuntimeReady false, reason
// DockerDaemonNotResponding. Version answers what Docker last said, and the reads come from
// memory. Once dockerd runs again, Status is ready again.
func TestStatusAnswersWhileDockerdIsFrozen(t *testing.T) {
	// The engine of the run: Docker 29 in integration-docker29.
	pd := StartPrivateDockerdWith(t, PrivateDockerdOptions{Docker29: sharedEngineMajor(t) >= 29}, busyboxImage, pauseImage)
	d := StartDaemon(t, "--docker-endpoint", pd.Host)
	podCfg := hostNetworkPod(newPodConfig(t, "frozen"))
	podID := runPod(t, d, podCfg, "")

	pid := pd.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw) // before the daemon's and dockerd's own cleanups
	awaitStopped(t, pid)

	// A kubelet-like deadline far longer than Status's own bound.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	st, err := d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Status with dockerd frozen (after %v): %v; want an answer", took, err)
	}
	t.Logf("Status with dockerd frozen answered in %v", took.Round(time.Millisecond))
	for _, c := range st.Status.Conditions {
		if c.Status || c.Reason != "DockerDaemonNotResponding" {
			t.Errorf("condition %s = %v, reason %q (%s); want false, DockerDaemonNotResponding", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if len(st.RuntimeHandlers) == 0 {
		t.Error("Status with dockerd frozen lists no runtime handlers; want the ones Docker last reported")
	}
	if v, err := d.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeVersion == "" {
		t.Errorf("Version with dockerd frozen = %v, %v; want Docker's last answer", v, err)
	}
	list, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: podID}})
	if err != nil || len(list.Items) != 1 || list.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("ListPodSandbox with dockerd frozen = %v, %v; want the ready pod, from memory", list, err)
	}

	thaw()
	awaitRuntimeReady(t, 30*time.Second, func(ctx context.Context) (*runtimeapi.StatusResponse, error) {
		return d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	})
}

// awaitStopped waits until every thread of pid is stopped. kill returns before a SIGSTOP has
// taken hold of a process, and a thread not yet stopped can still answer a ping (once in a
// loaded run: Status was ready 2 ms after the signal).
func awaitStopped(t *testing.T, pid int) {
	t.Helper()
	if !testutil.PollUntil(10*time.Second, 5*time.Millisecond, func() bool { return allThreadsStopped(pid) }) {
		t.Fatalf("pid %d is not stopped 10 s after SIGSTOP", pid)
	}
}

// allThreadsStopped tells whether every thread of pid is in state T (stopped) or t (traced).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state is the field after "(comm)"; comm itself may hold ")".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}
