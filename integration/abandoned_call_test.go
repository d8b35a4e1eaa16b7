//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// A RunPodSandbox and a CreateContainer whose caller gives up (the kubelet's deadline) while
// Docker creates the container: Docker makes it all the same, and only its answer would name
// it. What the call made is removed once Docker answers; nothing of the pod is left or listed,
// and the retry succeeds.
func TestCallsAbandonedDuringCreateLeaveNothing(t *testing.T) {
	const callerLeft = "the caller gave up while Docker creates the container"

	proxy := startDockerProxy(t, suite.docker.DaemonHost())
	d := StartDaemon(t, "--docker-endpoint", proxy.Host)
	podCfg := newPodConfig(t, "abandoned")

	// abandon runs call under a context that is cancelled once Docker made the container whose
	// name holds fragment, then lets Docker's answer reach cri-dockerd.
	abandon := func(fragment string, call func(ctx context.Context) error) {
		t.Helper()
		hold := proxy.HoldCreate(fragment)
		left := d.logLines(callerLeft)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- call(ctx) }()
		select {
		case <-hold.seen:
		case err := <-errc:
			t.Fatalf("the call ended before Docker's answer to its create: %v", err)
		case <-time.After(testutil.Scaled(time.Minute)):
			t.Fatal("no create reached Docker")
		}
		cancel()
		wantCode(t, <-errc, codes.Canceled)
		// Our client knows at once, the daemon once the stream's reset reaches it: an answer
		// let through before that goes to a caller the daemon thinks is still there.
		d.awaitLogLines(left, callerLeft)
		hold.Release()
	}
	// gone waits until Docker holds no container of the pod but keep (the sandbox, if any).
	gone := func(what string, keep string) {
		t.Helper()
		var left []string
		if !testutil.PollUntil(30*time.Second, 50*time.Millisecond, func() bool {
			left = nil
			for _, c := range podContainers(t, podCfg.Metadata) {
				if c.ID != keep {
					left = append(left, c.Names[0]+" "+c.State)
				}
			}
			return len(left) == 0
		}) {
			t.Fatalf("%s abandoned during its create left %v in Docker", what, left)
		}
	}

	abandon("_POD_"+podCfg.Metadata.Name+"_", func(ctx context.Context) error {
		_, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
		return err
	})
	gone("RunPodSandbox", "")
	list, err := d.Runtime.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: podCfg.Labels}})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("ListPodSandbox after the abandoned RunPodSandbox = %v, %v; want nothing", list, err)
	}

	podID := runPod(t, d, podCfg, "")
	cfg := containerConfig("c", sleeper)
	abandon("_c_"+podCfg.Metadata.Name+"_", func(ctx context.Context) error {
		_, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		return err
	})
	gone("CreateContainer", podID)
	id := createContainer(t, d, podID, podCfg, cfg)
	startContainer(t, d, id)
}
