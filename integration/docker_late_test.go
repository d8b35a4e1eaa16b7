//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// With Docker not up yet, cri-dockerd serves its socket at once, as containerd's CRI does:
// Version answers with Docker's version "unknown" (the kubelet and crictl check the connection with
// it), Status is not ready with the reason, the calls that need Docker answer Unavailable, and
// it connects when Docker comes, without a restart. It used to exit in 0.2 s, and systemd's start
// limit then gave up on it for good.
func TestDockerLateAtStart(t *testing.T) {
	// The engine of the run: Docker 29 in integration-docker29.
	pd := StartPrivateDockerdWith(t, PrivateDockerdOptions{Docker29: sharedEngineMajor(t) >= 29}, busyboxImage, pauseImage)
	pd.Stop()
	d := NewDaemon(t, "--docker-endpoint", pd.Host)
	d.DockerLater = true
	d.Start()

	ctx, cancel := context.WithTimeout(t.Context(), testutil.Scaled(time.Minute))
	defer cancel()
	st, err := d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status with Docker not up: %v", err)
	}
	wantNotReady(t, st, pd.Host)
	wantVersionWithoutDocker(t, ctx, d.Runtime)
	_, err = d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	wantCode(t, err, codes.Unavailable, pd.Host)
	podCfg := hostNetworkPod(newPodConfig(t, "late"))
	_, err = d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	wantCode(t, err, codes.Unavailable)
	_, err = d.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	wantCode(t, err, codes.Unavailable)
	if !d.Running() {
		t.Fatal("cri-dockerd exited while Docker was not up")
	}

	pd.Start()
	awaitRuntimeReady(t, time.Minute, func(ctx context.Context) (*runtimeapi.StatusResponse, error) {
		return d.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	})
	if v, err := d.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeVersion == "" || v.RuntimeVersion == "unknown" {
		t.Errorf("Version once Docker is up: %v, %v; want Docker's version", v, err)
	}
	podID := runPod(t, d, podCfg, "")
	if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Error(err)
	}
	if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Error(err)
	}
}

// The same under socket activation: READY=1 comes at once (systemd's start does not wait on
// Docker, and the unit never fails), Status over the passed socket is not ready, then ready once
// Docker is up, and STATUS= says which.
func TestDockerLateAtStartSocketActivated(t *testing.T) {
	// The engine of the run: Docker 29 in integration-docker29.
	pd := StartPrivateDockerdWith(t, PrivateDockerdOptions{Docker29: sharedEngineMajor(t) >= 29}, busyboxImage, pauseImage)
	pd.Stop()
	a := startActivated(t, pd.Host)
	a.awaitNote(t, "READY=1")

	ctx, cancel := context.WithTimeout(t.Context(), testutil.Scaled(time.Minute))
	defer cancel()
	st, err := a.Client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status over the activated socket with Docker not up: %v", err)
	}
	wantNotReady(t, st, pd.Host)
	wantVersionWithoutDocker(t, ctx, a.Client)
	_, err = a.Client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	wantCode(t, err, codes.Unavailable)

	pd.Start()
	a.awaitNote(t, "STATUS=serving")
	awaitRuntimeReady(t, time.Minute, func(ctx context.Context) (*runtimeapi.StatusResponse, error) {
		return a.Client.Status(ctx, &runtimeapi.StatusRequest{})
	})
	a.stop(t)
}

// wantNotReady checks both conditions are false with the reason of a Docker not reached, and a
// message naming its endpoint.
func wantNotReady(t *testing.T, st *runtimeapi.StatusResponse, endpoint string) {
	t.Helper()
	for _, c := range st.GetStatus().GetConditions() {
		if c.Status || c.Reason != "DockerDaemonNotReady" || !strings.Contains(c.Message, endpoint) {
			t.Errorf("condition %s = %v, reason %q, message %q; want false, DockerDaemonNotReady, the endpoint %s", c.Type, c.Status, c.Reason, c.Message, endpoint)
		}
	}
	if n := len(st.GetStatus().GetConditions()); n != 2 {
		t.Errorf("%d conditions, want RuntimeReady and NetworkReady", n)
	}
}

// wantVersionWithoutDocker checks the standby gate's Version: the fields core's Version answers
// that need no Docker, and the runtime version "unknown" (not empty: the kubelet's CRI client
// refuses a VersionResponse with an empty field). The gate answers it once the first try to
// reach Docker has failed (milliseconds after the start): until then it is Unavailable.
func wantVersionWithoutDocker(t *testing.T, ctx context.Context, rt runtimeapi.RuntimeServiceClient) {
	t.Helper()
	var v *runtimeapi.VersionResponse
	var err error
	testutil.PollUntil(10*time.Second, 50*time.Millisecond, func() bool {
		v, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
		return status.Code(err) != codes.Unavailable
	})
	if err != nil {
		t.Fatalf("Version with Docker not up: %v; want an answer (the kubelet and crictl check the connection with it)", err)
	}
	if v.Version != "0.1.0" || v.RuntimeName != "docker" || v.RuntimeVersion != "unknown" || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version with Docker not up = %v; want 0.1.0, docker, unknown, v1", v)
	}
}

// awaitRuntimeReady waits up to timeout (scaled) until status reports RuntimeReady.
func awaitRuntimeReady(t *testing.T, timeout time.Duration, status func(context.Context) (*runtimeapi.StatusResponse, error)) {
	t.Helper()
	var st *runtimeapi.StatusResponse
	var err error
	if !testutil.PollUntil(timeout, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err = status(ctx)
		return err == nil && len(st.Status.Conditions) > 0 && st.Status.Conditions[0].Status
	}) {
		t.Fatalf("not ready %v after Docker came back: %v, %v", timeout, st, err)
	}
}
