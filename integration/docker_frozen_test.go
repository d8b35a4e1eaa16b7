//go:build integration

package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
