//go:build integration

package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const capSysAdmin = 21

// namespaces reads the namespace links of a process: net, ipc and pid, in that order.
func namespaces(t *testing.T, read func(ns string) string) [3]string {
	t.Helper()
	var out [3]string
	for i, ns := range []string{"net", "ipc", "pid"} {
		out[i] = read(ns)
	}
	return out
}

// A CreateContainer request's sandbox_config that claims the node's namespaces and privileges
// gets the container none of it, seen from inside on a real Docker and again after a restart of
// ours (when the sandbox's record comes from Docker): the container is in the sandbox's
// network, IPC and PID namespaces, not the node's, and is not privileged; a privileged
// container is refused; a PID namespace TARGET in another pod is refused.
func TestCreateContainerTrustsTheSandboxNotTheRequest(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	ctx := t.Context()
	podCfg := newPodConfig(t, "record")
	sandboxID := runPod(t, d, podCfg, "")
	otherCfg := newPodConfig(t, "record-other")
	foreign := createContainer(t, d, runPod(t, d, otherCfg, ""), otherCfg, containerConfig("foreign", sleeper))
	startContainer(t, d, foreign)

	claim := proto.Clone(podCfg).(*runtimeapi.PodSandboxConfig)
	claim.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		Privileged: true,
		NamespaceOptions: &runtimeapi.NamespaceOption{
			Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE,
		},
	}}
	node := namespaces(t, func(ns string) string {
		link, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		return link
	})
	sandbox, err := suite.docker.ContainerInspect(ctx, sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	pod := namespaces(t, func(ns string) string {
		link, err := os.Readlink("/proc/" + strconv.Itoa(sandbox.State.Pid) + "/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		return link
	})
	if pod == node {
		t.Fatalf("the sandbox is in the node's namespaces: %v", pod)
	}

	for _, restarted := range []bool{false, true} {
		if restarted {
			d.Restart()
		}
		privileged := containerConfig("privileged-"+strconv.FormatBool(restarted), sleeper)
		privileged.Linux.SecurityContext.Privileged = true
		_, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: privileged, SandboxConfig: claim})
		wantCode(t, err, codes.InvalidArgument, "privileged")

		// The kubelet's hostPID container asks for the node's PID namespace; in a pod not
		// created so, it gets the sandbox's.
		cfg := containerConfig("claims-"+strconv.FormatBool(restarted), sleeper)
		cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
		resp, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: claim})
		if err != nil {
			t.Fatalf("restarted=%v: CreateContainer: %v", restarted, err)
		}
		startContainer(t, d, resp.ContainerId)
		inside := namespaces(t, func(ns string) string {
			out, _, code := execIn(t, d, resp.ContainerId, "readlink", "/proc/self/ns/"+ns)
			if code != 0 {
				t.Fatalf("readlink /proc/self/ns/%s: exit %d", ns, code)
			}
			return strings.TrimSpace(out)
		})
		if inside != pod {
			t.Errorf("restarted=%v: the container's net, ipc and pid namespaces %v, want the sandbox's %v (the node's: %v)", restarted, inside, pod, node)
		}
		if hasCap(t, procStatus(t, d, resp.ContainerId, "CapEff"), capSysAdmin) {
			t.Errorf("restarted=%v: the container has CAP_SYS_ADMIN: privileged from the request", restarted)
		}

		target := containerConfig("target-"+strconv.FormatBool(restarted), sleeper)
		target.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: foreign}
		_, err = d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: target, SandboxConfig: podCfg})
		wantCode(t, err, codes.InvalidArgument, foreign)
	}
}
