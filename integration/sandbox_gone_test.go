//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// filesUnder lists the files left in the root directory's subdirectory dir.
func filesUnder(t *testing.T, d *Daemon, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.Dir, "root", dir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// podWithRemovedPause runs a pod with a running app container, then removes its pause
// container behind cri-dockerd's back.
func podWithRemovedPause(t *testing.T, d *Daemon, cfg *runtimeapi.PodSandboxConfig, id string) string {
	t.Helper()
	ctr := createContainer(t, d, id, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := suite.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("docker rm -f of the pause container: %v", err)
	}
	if c, err := suite.docker.ContainerInspect(ctx, ctr); err != nil || !c.State.Running {
		t.Fatalf("the app container should still run after docker rm -f of the pause container (%v)", err)
	}
	// cri-dockerd learns of a removal behind its back from Docker's destroy event, which a
	// loaded machine delays: until then the pod is listed as it was.
	var list *runtimeapi.ListPodSandboxResponse
	var err error
	if !testutil.PollUntil(30*time.Second, 20*time.Millisecond, func() bool {
		list, err = d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
		return err == nil && len(list.Items) == 1 && list.Items[0].State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}) {
		t.Fatalf("ListPodSandbox after docker rm -f of the pause container = %v, %v; want the pod NOTREADY", list.GetItems(), err)
	}
	return ctr
}

// checkNothingLeft checks that the pod (sandbox id, containers ctrs) left no container,
// checkpoint, pin or log record.
func checkNothingLeft(t *testing.T, d *Daemon, cfg *runtimeapi.PodSandboxConfig, id string, ctrs ...string) {
	t.Helper()
	if list := podContainers(t, cfg.Metadata); len(list) != 0 {
		t.Errorf("%d Docker containers of the pod left, want none", len(list))
	}
	for _, dir := range []string{"sandboxes", "netns"} {
		if files := filesUnder(t, d, dir); len(files) != 0 {
			t.Errorf("files left in %s: %v", dir, files)
		}
	}
	// The pod's log records only: a start resumes the logs of every CRI container of the
	// engine, other tests' (or other CI jobs') included.
	for _, f := range filesUnder(t, d, "containerlogs") {
		for _, own := range append([]string{id}, ctrs...) {
			if strings.HasPrefix(f, own) {
				t.Errorf("log record left in containerlogs: %s", f)
			}
		}
	}
	_, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	// Idempotent.
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("a second RemovePodSandbox: %v", err)
	}
}

// `docker rm -f` of a CNI pod's pause container: crictl still lists the pod NotReady, also
// after a restart of cri-dockerd, and `crictl rmp` (PodSandboxStatus, then RemovePodSandbox)
// removes its app container, tears its network down and leaves nothing.
func TestCrictlRmpOfAPodWhosePauseContainerWasRemoved(t *testing.T) {
	crictl := crictlBinary(t)
	for _, restart := range []bool{false, true} {
		name := "running"
		if restart {
			name = "after-a-restart"
		}
		t.Run(name, func(t *testing.T) { crictlRmpOfAPodWhosePauseContainerWasRemoved(t, crictl, restart) })
	}
}

func crictlRmpOfAPodWhosePauseContainerWasRemoved(t *testing.T, crictl string, restart bool) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	cfg := newPodConfig(t, "gone")
	id := runCNIPod(t, d, cfg)
	ip := sandboxIP(t, d, id)
	ctr := podWithRemovedPause(t, d, cfg, id)
	if restart {
		d.Restart()
	}

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(crictl, append([]string{"--runtime-endpoint", "unix://" + d.Socket, "--timeout", "60s"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("crictl %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	out := run("pods", "--id", id, "-o", "json")
	if !strings.Contains(out, id) || !strings.Contains(out, `"SANDBOX_NOTREADY"`) || !strings.Contains(out, cfg.Metadata.Name) {
		t.Fatalf("crictl pods does not show the pod NotReady with its name:\n%s", out)
	}
	st, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus of the pod whose pause container is gone: %v", err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Network.GetIp() != ip || st.Status.Metadata.GetUid() != cfg.Metadata.Uid {
		t.Errorf("status = %v, want NOTREADY with IP %s and the pod's uid", st.Status, ip)
	}
	// After a restart, what the containers hold: not the pod's own labels.
	if !restart && st.Status.Labels["crid-it-pod"] != cfg.Labels["crid-it-pod"] {
		t.Errorf("labels = %v, want the pod's", st.Status.Labels)
	}
	if got := leases(t, cniNetwork, id); len(got) != 1 {
		t.Errorf("leases before rmp = %v, want the pod's", got)
	}
	if out := run("rmp", id[:12]); !strings.Contains(out, "Removed sandbox") {
		t.Errorf("crictl rmp: %s", out)
	}
	checkNothingLeft(t, d, cfg, id, ctr)
	if got := leases(t, cniNetwork, id); len(got) != 0 {
		t.Errorf("IP leases left: %v", got)
	}
	if n := masqueradeRules(t, id); n != 0 {
		t.Errorf("%d NAT rules of the pod left", n)
	}
}

// The same through the CRI as the kubelet does it (StopPodSandbox, then RemovePodSandbox), on
// Docker's bridge (no checkpoint: the app container alone keeps the pod listed).
func TestStopAndRemoveOfAPodWhosePauseContainerWasRemoved(t *testing.T) {
	d := StartDaemon(t)
	cfg := newPodConfig(t, "gone")
	id := runPod(t, d, cfg, "")
	ctr := podWithRemovedPause(t, d, cfg, id)

	list, err := d.Runtime.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: cfg.Labels}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Id != id || list.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || list.Items[0].Metadata.Name != cfg.Metadata.Name {
		t.Fatalf("ListPodSandbox = %v, want the pod NOTREADY", list.Items)
	}
	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	c, err := suite.docker.ContainerInspect(t.Context(), ctr)
	if err != nil || c.State.Running {
		t.Errorf("the app container still runs after StopPodSandbox (%v)", err)
	}
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	checkNothingLeft(t, d, cfg, id, ctr)
	list, err = d.Runtime.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: cfg.Labels}})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("ListPodSandbox after the removal = %v, %v; want nothing", list.GetItems(), err)
	}
}

// CreateContainer into a pod whose pause container was removed behind our back answers
// NotFound, and into a stopped pod FailedPrecondition, and neither creates a container: Docker
// itself would create one (a container: network mode is not checked before start) that no pod
// owns. cri-dockerd learns of the removal from Docker's events, without an inspect per container.
func TestCreateContainerIntoASandboxThatEndedIsRefused(t *testing.T) {
	d := StartDaemon(t)
	removedCfg := newPodConfig(t, "ended-rm")
	removed := runPod(t, d, removedCfg, "")
	stoppedCfg := newPodConfig(t, "ended-stop")
	stopped := runPod(t, d, stoppedCfg, "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := suite.docker.ContainerRemove(ctx, removed, container.RemoveOptions{Force: true}); err != nil {
		t.Fatalf("docker rm -f of the pause container: %v", err)
	}
	if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: stopped}); err != nil {
		t.Fatal(err)
	}
	create := func(id string, cfg *runtimeapi.PodSandboxConfig) error {
		_, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: containerConfig("app", sleeper), SandboxConfig: cfg})
		return err
	}
	wantCode(t, create(stopped, stoppedCfg), codes.FailedPrecondition)
	// The removal's event may still be on its way: bounded wait, and every attempt that got
	// through before it is counted below.
	var err error
	testutil.PollUntil(10*time.Second, 20*time.Millisecond, func() bool {
		if err = create(removed, removedCfg); err != nil {
			return true
		}
		t.Logf("CreateContainer went through before the removal's event arrived")
		return false
	})
	wantCode(t, err, codes.NotFound, "removed")
	for _, m := range []*runtimeapi.PodSandboxMetadata{stoppedCfg.Metadata} {
		if list := podContainers(t, m); len(list) != 1 { // the pause container only
			t.Errorf("%d Docker containers of the stopped pod, want its pause container only", len(list))
		}
	}
}
