package standby

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (service) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "docker", RuntimeVersion: "29.8.0"}, nil
}

func (service) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:1"}}}, nil
}

// serve runs a gRPC server with the gate behind an interceptor that counts the calls it sees.
func serve(t *testing.T, g *Gate) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient, *atomic.Int32) {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		seen.Add(1)
		return handler(ctx, req)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(count))
	g.Register(server)
	go server.Serve(lis)
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn), &seen
}

// waitingVersion is what cmd/cri-dockerd gives the gate: core.VersionAnswer("unknown"), the
// fields that need no Docker.
func waitingVersion() *runtimeapi.VersionResponse {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "docker", RuntimeVersion: "unknown", RuntimeApiVersion: "v1"}
}

func TestGateAnswersNotReadyUntilServed(t *testing.T) {
	g := New(waitingVersion(), "DockerDaemonNotReady", "waiting for docker at unix:///var/run/docker.sock")
	rt, img, seen := serve(t, g)
	ctx := t.Context()

	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatalf("Status while waiting: %v", err)
	}
	if len(st.Status.Conditions) != 2 {
		t.Fatalf("conditions %v, want RuntimeReady and NetworkReady", st.Status.Conditions)
	}
	for _, c := range st.Status.Conditions {
		if c.Status || c.Reason != "DockerDaemonNotReady" || c.Message != "waiting for docker at unix:///var/run/docker.sock" {
			t.Errorf("condition %v while waiting; want false with the gate's reason and message", c)
		}
	}
	g.Waiting("DockerDaemonNotReady", "docker: connection refused")
	if _, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{}); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "cri-dockerd is not serving yet: docker: connection refused" {
		t.Errorf("ListImages while waiting: %v; want Unavailable with the last message", err)
	}
	if _, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("ListPodSandbox while waiting: %v; want Unavailable", err)
	}
	events, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = events.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("GetContainerEvents while waiting: %v; want Unavailable", err)
	}
	if n := seen.Load(); n != 3 {
		t.Errorf("the interceptors saw %d unary calls while waiting, want 3 (logs and metrics count them too)", n)
	}
	if g.Ready() {
		t.Error("Ready before Serve")
	}

	g.Serve(service{})
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeVersion != "29.8.0" {
		t.Errorf("Version once served = %v, %v; want the service's answer", v, err)
	}
	list, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 {
		t.Errorf("ListImages once served = %v, %v; want the service's answer", list, err)
	}
	// What the service does not implement stays its own answer.
	if _, err := rt.Status(ctx, &runtimeapi.StatusRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Status once served by a service without it: %v; want Unimplemented", err)
	}
	if n := seen.Load(); n != 6 {
		t.Errorf("the interceptors saw %d unary calls, want 6", n)
	}
}

// The kubelet's CRI client and crictl call Version first and give up on the connection when it
// fails: while waiting, the gate answers it with the version it was given, through the
// interceptors, so that they get on to Status and learn why the runtime is not ready. Before
// the first try to reach Docker has an outcome, Version waits for it.
func TestGateAnswersVersionWhileWaiting(t *testing.T) {
	want := waitingVersion()
	g := New(want, "DockerDaemonNotReady", "connecting to docker at unix:///var/run/docker.sock")
	want.RuntimeName = "changed after New" // the gate keeps its own copy
	rt, _, seen := serve(t, g)
	ctx := t.Context()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := rt.Version(short, &runtimeapi.VersionRequest{Version: "0.1.0"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Version before the first try's outcome: %v; want it to wait (DeadlineExceeded here)", err)
	}
	g.Waiting("DockerDaemonNotReady", "docker: connection refused (retrying)")

	for i := range 2 {
		v, err := rt.Version(ctx, &runtimeapi.VersionRequest{Version: "0.1.0"})
		if err != nil {
			t.Fatalf("Version while waiting: %v; want an answer (crictl and the kubelet stop at a failed Version)", err)
		}
		if v.Version != "0.1.0" || v.RuntimeName != "docker" || v.RuntimeVersion != "unknown" || v.RuntimeApiVersion != "v1" {
			t.Errorf("Version while waiting (call %d) = %v; want 0.1.0, docker, unknown, v1", i+1, v)
		}
	}
	// Then Status, as crictl info does.
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status after Version while waiting: %v", err)
	}
	if c := st.Status.Conditions[0]; c.Type != runtimeapi.RuntimeReady || c.Status || c.Reason != "DockerDaemonNotReady" {
		t.Errorf("first condition %v; want RuntimeReady false, DockerDaemonNotReady", c)
	}
	if n := seen.Load(); n != 4 {
		t.Errorf("the interceptors saw %d calls, want 4 (Version is logged and counted too)", n)
	}
}

// systemd's socket activation starts cri-dockerd on a client's first connection, so its first
// call always comes before the first try to reach Docker; kubeadm's preflight asks once. The
// call waits and gets the service's answer once it is built.
func TestGateHoldsCallsUntilTheFirstTry(t *testing.T) {
	g := New(waitingVersion(), "DockerDaemonNotReady", "connecting to docker at unix:///var/run/docker.sock")
	rt, img, _ := serve(t, g)
	ctx := t.Context()
	type answer struct {
		version string
		images  int
		err     error
	}
	got := make(chan answer, 2)
	go func() {
		v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
		got <- answer{version: v.GetRuntimeVersion(), err: err}
	}()
	go func() {
		l, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		got <- answer{images: len(l.GetImages()), err: err}
	}()
	for g.waiters.Load() != 2 {
		select {
		case a := <-got:
			t.Fatalf("a call answered before the first try: %+v", a)
		case <-time.After(time.Millisecond):
		}
	}
	g.Serve(service{})
	for range 2 {
		a := <-got
		if a.err != nil || (a.version != "29.8.0" && a.images != 1) {
			t.Errorf("a call held until Serve answered %+v; want the service's answer", a)
		}
	}
}
