//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// With dockerd stopped while cri-dockerd serves, calls that need Docker answer Unavailable (gRPC's
// "retry me"; it was Unknown), and the same calls succeed again once dockerd is back, without a
// restart of cri-dockerd.
func TestDockerDownAnswersUnavailableThenRecovers(t *testing.T) {
	pd := StartPrivateDockerd(t, busyboxImage, pauseImage)
	d := StartDaemon(t, "--docker-endpoint", pd.Host)
	podCfg := hostNetworkPod(newPodConfig(t, "unavail"))
	podID := runPod(t, d, podCfg, "")
	id := createContainer(t, d, podID, podCfg, containerConfig("c", sleeper))

	calls := map[string]func(ctx context.Context) error{
		"ContainerStatus": func(ctx context.Context) error {
			_, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		},
		"ImageStatus": func(ctx context.Context) error {
			_, err := d.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
			return err
		},
		"ListImages": func(ctx context.Context) error {
			_, err := d.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			return err
		},
	}
	const unsynced = "reads go to Docker until its events are followed again"
	before := d.logLines(unsynced)
	pd.Stop()
	down := time.Now()
	// The store answers from memory until it sees Docker's event stream end.
	d.awaitLogLines(before, unsynced)
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := call(ctx)
		cancel()
		wantCode(t, err, codes.Unavailable)
		t.Logf("%s with dockerd down: %v", name, err)
	}
	// Only while it is down: dockerd's stop killed the pod, so these fail for that reason after.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.Unavailable)
	_, err = d.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 5})
	wantCode(t, err, codes.Unavailable)
	_, err = d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: hostNetworkPod(newPodConfig(t, "unavail2"))})
	wantCode(t, err, codes.Unavailable)
	t.Logf("RunPodSandbox with dockerd down (%v after the stop): %v", time.Since(down).Round(time.Millisecond), err)

	pd.Start()
	up := time.Now()
	for name, call := range calls {
		var err error
		testutil.PollUntil(10*time.Second, 20*time.Millisecond, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			err = call(ctx)
			cancel()
			return err == nil || status.Code(err) != codes.Unavailable
		})
		if err == nil {
			t.Logf("%s succeeds %v after dockerd's start", name, time.Since(up).Round(time.Millisecond))
		} else {
			t.Errorf("%s after dockerd's start: %v, want success (Unavailable until then)", name, err)
		}
	}
	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Error(err)
	}
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Error(err)
	}
}
