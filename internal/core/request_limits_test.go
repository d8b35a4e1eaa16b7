package core

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// A timeout in seconds beyond what time.Duration holds must not wrap to a negative duration, which
// expired at once (ExecSync "timed out after 9223372036854775807s") or killed without grace.
func TestHugeTimeoutsDoNotOverflow(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	fake.SetExecHandler(func(string, []string) libdocker.ExecResult {
		return libdocker.ExecResult{Stdout: "ok", Delay: 50 * time.Millisecond}
	})
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	for _, timeout := range []int64{math.MaxInt64, math.MaxInt64 / int64(time.Second), math.MaxInt64/int64(time.Second) + 1, maxRequestSeconds + 1} {
		resp, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: timeout})
		if err != nil || string(resp.Stdout) != "ok" {
			t.Errorf("ExecSync timeout %d: %v", timeout, err)
		}
	}
	_, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: -1})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: -1})
	wantCode(t, err, codes.InvalidArgument)

	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	got, ok := fake.LastStopTimeout(id)
	if want := time.Duration(maxRequestSeconds) * time.Second; !ok || got != want {
		t.Errorf("StopContainer timeout MaxInt64 reached Docker as %v (called: %v), want %v", got, ok, want)
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 30}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fake.LastStopTimeout(id); got != 30*time.Second {
		t.Errorf("StopContainer timeout 30 reached Docker as %v", got)
	}
}

func TestSizeSumsSaturate(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{-5, 3, -2},
	} {
		if got := addSaturating(tc.a, tc.b); got != tc.want {
			t.Errorf("addSaturating(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	// A memory limit plus a huge memory.swap.max must not wrap to a negative (or "unlimited")
	// memory+swap limit.
	s := &Service{log: logrus.NewEntry(logrus.New())}
	res, _, _ := s.dockerResources(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30, Unified: map[string]string{"memory.swap.max": "9223372036854775807"}}, true)
	if res.MemorySwap != math.MaxInt64 {
		t.Errorf("MemorySwap %d, want MaxInt64", res.MemorySwap)
	}
}
