package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

func TestOperationNamesHidesIDsAndImageNames(t *testing.T) {
	for path, want := range map[string]string{
		"/v1.41/containers/0123abcd/json":                "GET /containers/{id}/json",
		"/v1.41/containers/json":                         "GET /containers/json",
		"/v1.41/containers/create":                       "GET /containers/create",
		"/v1.41/exec/deadbeef/start":                     "GET /exec/{id}/start",
		"/v1.41/images/registry.k8s.io/pause:3.10/json":  "GET /images/{name}/json",
		"/v1.41/images/json":                             "GET /images/json",
		"/v1.41/images/docker.io/library/busybox:latest": "GET /images/{name}",
		"/_ping":      "GET /_ping",
		"/v1.43/info": "GET /info",
	} {
		if got := Operation("GET", path); got != want {
			t.Errorf("Operation(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestMetricsEndpointReportsCallsErrorsAndHandlers(t *testing.T) {
	m := New(Sources{
		PodsByHandler: func() map[string]int { return map[string]int{"": 2, "runsc": 1} },
		LogFollowers:  func() int { return 3 },
	})
	intercept := m.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"}
	_, _ = intercept(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	_, _ = intercept(context.Background(), nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "bad")
	})
	m.ObserveDocker("POST /containers/create", 3*time.Millisecond, false)
	m.ObserveDocker("POST /containers/{id}/start", time.Millisecond, true)
	m.StreamingSessions.WithLabelValues("exec").Inc()
	m.ObserveStatsRefresh(2*time.Millisecond, false)
	m.ObserveStatsRefresh(time.Second, true)
	m.LogWriteFailed()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, err := m.Serve(ctx, "127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`cri_dockerd_cri_request_duration_seconds_count{method="RunPodSandbox"} 2`,
		`cri_dockerd_cri_request_errors_total{code="InvalidArgument",method="RunPodSandbox"} 1`,
		`cri_dockerd_docker_operation_duration_seconds_count{operation="POST /containers/create"} 1`,
		`cri_dockerd_docker_operation_errors_total{operation="POST /containers/{id}/start"} 1`,
		`cri_dockerd_pod_sandboxes{runtime_handler="runsc"} 1`,
		`cri_dockerd_streaming_sessions{kind="exec"} 1`,
		`cri_dockerd_stats_refresh_duration_seconds_count 2`,
		`cri_dockerd_stats_refresh_duration_seconds_bucket{le="0.002"} 1`,
		`cri_dockerd_stats_refresh_errors_total 1`,
		`cri_dockerd_log_followers 3`,
		`cri_dockerd_log_write_failures_total 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("metrics server did not stop")
	}
}

// /debug/pprof is served only when asked; /metrics either way.
func TestPprofIsServedOnlyWhenAsked(t *testing.T) {
	m := New(Sources{})
	for _, tc := range []struct {
		pprof bool
		want  map[string]int // path: status
	}{
		{false, map[string]int{"/metrics": 200, "/debug/pprof/": 404, "/debug/pprof/goroutine?debug=1": 404, "/debug/pprof/cmdline": 404}},
		{true, map[string]int{"/metrics": 200, "/debug/pprof/": 200, "/debug/pprof/goroutine?debug=1": 200, "/debug/pprof/cmdline": 200}},
	} {
		srv := httptest.NewServer(m.Handler(tc.pprof))
		for path, want := range tc.want {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pprof %v: GET %s answers %d, want %d", tc.pprof, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}

// A metrics listener on anything but a loopback address is reachable by others, and warned about.
func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9099":         true,
		"127.0.0.2:9099":         true,
		"[::1]:9099":             true,
		"localhost:9099":         true,
		"LocalHost:9099":         true,
		"0.0.0.0:9099":           false,
		":9099":                  false,
		"[::]:9099":              false,
		"10.0.0.5:9099":          false,
		"[2001:db8::1]:9099":     false,
		"node.example:9099":      false,
		"localhost.example:9099": false,
		"127.0.0.1":              false, // not HOST:PORT: Validate refuses it; never called loopback
	} {
		if got := LoopbackOnly(addr); got != want {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", addr, got, want)
		}
	}
}

// serveForTest serves the metrics on loopback with the given bounds until the test ends.
func serveForTest(t *testing.T, lim limits) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, err := New(Sources{}).serve(ctx, "127.0.0.1:0", false, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr.String()
}

// Beyond the cap, a connection waits unanswered until another closes.
func TestMetricsListenerCapsConnections(t *testing.T) {
	addr := serveForTest(t, limits{maxConns: 2, readHeaderTimeout: time.Minute, idleTimeout: time.Hour})
	testutil.CheckConnCap(t, addr, "/metrics", 2)
}

// A kept-alive connection left idle is closed after the idle timeout.
func TestMetricsListenerClosesIdleConnections(t *testing.T) {
	addr := serveForTest(t, limits{maxConns: 2, readHeaderTimeout: time.Minute, idleTimeout: 50 * time.Millisecond})
	testutil.CheckIdleConnClosed(t, addr, "/metrics", 10*time.Second)
}
