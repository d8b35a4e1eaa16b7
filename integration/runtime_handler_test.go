//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runPodWithContainer runs a pod with handler and one started container, and returns the
// sandbox and container IDs.
func runPodWithContainer(t *testing.T, d *Daemon, prefix, handler string) (string, string) {
	t.Helper()
	cfg := newPodConfig(t, prefix)
	sandboxID := runPod(t, d, cfg, handler)
	ctrID := createContainer(t, d, sandboxID, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctrID)
	return sandboxID, ctrID
}

func wantSandboxHandler(t *testing.T, d *Daemon, sandboxID, want string) {
	t.Helper()
	st, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if got := st.Status.RuntimeHandler; got != want {
		t.Errorf("PodSandboxStatus.runtime_handler = %q, want %q", got, want)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox state = %v, want SANDBOX_READY", st.Status.State)
	}
}

func wantRuntime(t *testing.T, want string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if got := dockerRuntime(t, id); got != want {
			t.Errorf("container %.12s: HostConfig.Runtime = %q, want %q", id, got, want)
		}
	}
}

func TestDefaultHandlerUsesDockerDefaultRuntime(t *testing.T) {
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t)
	for _, handler := range []string{"", "docker"} {
		t.Run("handler="+handler, func(t *testing.T) {
			sandboxID, ctrID := runPodWithContainer(t, d, "default", handler)
			wantRuntime(t, info.DefaultRuntime, sandboxID, ctrID)
			wantSandboxHandler(t, d, sandboxID, handler)
			if wrapperCreated(t, sandboxID) || wrapperCreated(t, ctrID) {
				t.Errorf("the default handler ran a container on the wrapped runtime")
			}
		})
	}
}

func TestNamedHandlerRunsSandboxAndContainersOnThatRuntime(t *testing.T) {
	d := StartDaemon(t)
	sandboxID, ctrID := runPodWithContainer(t, d, "wrapped", "wrapped")
	wantRuntime(t, "wrapped", sandboxID, ctrID)
	wantSandboxHandler(t, d, sandboxID, "wrapped")
	for what, id := range map[string]string{"sandbox": sandboxID, "container": ctrID} {
		if !wrapperCreated(t, id) {
			t.Errorf("%s %.12s: %s has no `create` line for it: the wrapped runtime did not run it", what, id, wrapperLog)
		}
	}
}

func TestAliasHandlerMapsToDockerRuntime(t *testing.T) {
	d := StartDaemon(t, "--runtime-handler", "alt=runc-alt")
	sandboxID, ctrID := runPodWithContainer(t, d, "alias", "alt")
	wantRuntime(t, "runc-alt", sandboxID, ctrID)
	wantSandboxHandler(t, d, sandboxID, "alt")
	list, err := d.Runtime.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sandboxID}})
	if err != nil || len(list.Items) != 1 || list.Items[0].RuntimeHandler != "alt" {
		t.Errorf("ListPodSandbox(id) = %v, %v; want one sandbox with runtime_handler \"alt\"", list, err)
	}
}

func TestConfigFileRuntimeHandlerAlias(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cri-dockerd.yaml")
	if err := os.WriteFile(path, []byte("log-level: debug\nruntime-handler: [alt2=runc-alt]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, "--config", path)
	sandboxID, ctrID := runPodWithContainer(t, d, "config", "alt2")
	wantRuntime(t, "runc-alt", sandboxID, ctrID)
	wantSandboxHandler(t, d, sandboxID, "alt2")
}

func TestUnknownHandlerIsRejectedAndLeavesNothing(t *testing.T) {
	d := StartDaemon(t)
	cfg := newPodConfig(t, "unknown")
	handler := "nosuch-" + randHex()
	_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	// Names the handler, lists what Docker knows, and says how to add a runtime.
	t.Logf("RunPodSandbox: %v", err)
	wantCode(t, err, codes.InvalidArgument, handler, "runc", "wrapped", "runc-alt", "daemon.json", "--runtime-handler")
	if left := podContainers(t, cfg.Metadata); len(left) != 0 {
		t.Errorf("rejected pod left %d Docker containers behind: %v", len(left), left[0].Names)
	}
}

func TestBrokenRuntimeFailsPreconditionAndLeavesNothing(t *testing.T) {
	d := StartDaemon(t)
	cfg := newPodConfig(t, "broken")
	_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "broken"})
	t.Logf("RunPodSandbox: %v", err)
	wantCode(t, err, codes.FailedPrecondition, `"broken"`, "is a directory")
	if left := podContainers(t, cfg.Metadata); len(left) != 0 {
		t.Errorf("failed pod left %d Docker containers behind: %v", len(left), left[0].Names)
	}
}

func TestContainerKeepsPodRuntimeAcrossRestart(t *testing.T) {
	d := StartDaemon(t)
	cfg := newPodConfig(t, "restart")
	sandboxID := runPod(t, d, cfg, "wrapped")
	// A new process: only Docker's labels can tell it which runtime the pod has.
	d.Restart()
	ctrID := createContainer(t, d, sandboxID, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctrID)
	wantRuntime(t, "wrapped", sandboxID, ctrID)
	if !wrapperCreated(t, ctrID) {
		t.Errorf("container created after the restart did not run on the wrapped runtime")
	}
	st, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("ContainerStatus after restart = %v, %v; want CONTAINER_RUNNING", st, err)
	}
	wantSandboxHandler(t, d, sandboxID, "wrapped")
}

func TestStatusListsRuntimeHandlers(t *testing.T) {
	d := StartDaemon(t, "--runtime-handler", "alt=runc-alt", "--runtime-handler", "alt3=wrapped")
	resp, err := d.Runtime.Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if !c.Status {
			t.Errorf("condition %s is false: %s %s", c.Type, c.Reason, c.Message)
		}
	}
	got := map[string]bool{}
	for _, h := range resp.RuntimeHandlers {
		got[h.Name] = true
	}
	for _, want := range []string{"", "docker", "runc", "wrapped", "runc-alt", "alt", "alt3"} {
		if !got[want] {
			t.Errorf("Status.runtime_handlers lacks %q (got %v)", want, got)
		}
	}
}

func TestRuntimeConfigCgroupDriverMatchesDocker(t *testing.T) {
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t)
	resp, err := d.Runtime.RuntimeConfig(t.Context(), &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]runtimeapi.CgroupDriver{"cgroupfs": runtimeapi.CgroupDriver_CGROUPFS, "systemd": runtimeapi.CgroupDriver_SYSTEMD}[info.CgroupDriver]
	if got := resp.GetLinux().GetCgroupDriver(); got != want {
		t.Errorf("RuntimeConfig cgroup driver = %v, docker info says %q", got, info.CgroupDriver)
	}
}
