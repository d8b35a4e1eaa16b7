package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// cpuOf is the CPU timestamp and cumulative usage of each container of a stats list.
func cpuOf(stats []*runtimeapi.ContainerStats) map[string]*runtimeapi.CpuUsage {
	out := map[string]*runtimeapi.CpuUsage{}
	for _, st := range stats {
		out[st.Attributes.Id] = st.Cpu
	}
	return out
}

// crictl stats/statsp sample twice, a second apart, and fail with "cpu stat is not updated
// during sample" when the second answer carries the first one's timestamp.
func TestStatsAskedAgainAfterASecondAreNewer(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	// crictl samples twice a second apart, which is the collector's max age (checked in
	// internal/stats); the test runs the same rule on a shorter clock, without background
	// refresh: whatever is newer was asked for.
	const age = 200 * time.Millisecond
	useStats(s, stats.Config{Interval: time.Hour, MaxAge: age})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "crictl", "")
	c1 := startedContainer(t, s, podID, podCfg, "c1")
	c2 := startedContainer(t, s, podID, podCfg, "c2")

	list := func() (map[string]*runtimeapi.CpuUsage, *runtimeapi.CpuUsage) {
		t.Helper()
		resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		pod, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
		if err != nil {
			t.Fatal(err)
		}
		return cpuOf(resp.Stats), pod.Stats.Linux.Cpu
	}
	first, firstPod := list()
	fake.ResetCalls()
	// Asked again at once (the kubelet's pod and container calls of one poll): the same sample,
	// no Docker call.
	again, againPod := list()
	if n := fake.Calls("ContainerStats"); n != 0 {
		t.Errorf("%d Docker stats calls for a repeat within %v", n, age)
	}
	for _, id := range []string{c1, c2} {
		if again[id].Timestamp != first[id].Timestamp {
			t.Errorf("%s: a repeat at once got a new sample (%v, then %v)", id, first[id], again[id])
		}
	}
	if againPod.Timestamp != firstPod.Timestamp {
		t.Errorf("pod: a repeat at once got a new sample")
	}

	time.Sleep(age) // what crictl sleeps between its two samples (scaled)
	fake.ResetCalls()
	second, secondPod := list()
	for _, id := range []string{c1, c2} {
		a, b := first[id], second[id]
		if b.Timestamp <= a.Timestamp || b.UsageCoreNanoSeconds.GetValue() <= a.UsageCoreNanoSeconds.GetValue() {
			t.Errorf("%s: second sample %v after first %v, want a later timestamp and more CPU", id, b, a)
		}
		// The rate between the two samples: the fake's container uses a tenth of a core.
		if r := b.GetUsageNanoCores().GetValue(); r < 5e7 || r > 2e8 {
			t.Errorf("%s: CPU rate %v, want about 1e8 nano cores", id, b.UsageNanoCores)
		}
	}
	if secondPod.Timestamp <= firstPod.Timestamp || secondPod.UsageCoreNanoSeconds.GetValue() <= firstPod.UsageCoreNanoSeconds.GetValue() {
		t.Errorf("pod: second sample %v after first %v", secondPod, firstPod)
	}
	// One refresh per container and sandbox, shared by the container and the pod call.
	if n := fake.Calls("ContainerStats"); n != 3 {
		t.Errorf("%d Docker stats calls, want one each for the sandbox and its two containers", n)
	}

	// ContainerStats of one container behaves the same.
	one := func() *runtimeapi.CpuUsage {
		resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: c1})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Stats.Cpu
	}
	a := one()
	time.Sleep(age)
	if b := one(); b.Timestamp <= a.Timestamp {
		t.Errorf("ContainerStats a second later: %v, then %v", a, b)
	}

	// The CRI metrics read the cache as it is: a scrape forces no refresh.
	time.Sleep(age)
	fake.ResetCalls()
	if _, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := fake.Calls("ContainerStats"); n != 0 {
		t.Errorf("a metrics scrape made %d Docker stats calls", n)
	}
}

// The kubelet polls every 10 s, between two background refreshes: each poll must find a sample
// newer than its last one and cost no Docker call, so that the background refresh stays the
// only one. The test is the background refresh's clock: it sends a round's tick, waits until
// the round has refreshed the pod's three containers, then polls, as a kubelet at its own phase
// does between two rounds (timed polls on a busy machine came back to back, the second within
// the max age of the first, and found its sample).
func TestStatsKubeletCadenceMakesNoExtraDockerCalls(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	const interval = 10 * time.Second
	ticks := make(chan time.Time)
	refreshed := make(chan struct{}, 1024)
	s.opts.StatsRefreshed = func(time.Duration, bool) { refreshed <- struct{}{} }
	useStats(s, stats.Config{Interval: interval, MaxAge: testutil.Scaled(time.Second), StaleAfter: time.Hour, Keep: time.Hour, Ticks: ticks})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "kubelet", "")
	c1 := startedContainer(t, s, podID, podCfg, "c1")
	c2 := startedContainer(t, s, podID, podCfg, "c2")

	poll := func() (map[string]*runtimeapi.CpuUsage, int64) {
		t.Helper()
		// One kubelet poll: pod stats, then container stats.
		pods, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
		if err != nil || len(pods.Stats) != 1 {
			t.Fatalf("ListPodSandboxStats = %v, %v", pods, err)
		}
		resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
		if err != nil || len(resp.Stats) != 2 {
			t.Fatalf("ListContainerStats = %v, %v", resp, err)
		}
		return cpuOf(resp.Stats), pods.Stats[0].Linux.Cpu.Timestamp
	}
	// Three Docker containers (sandbox, c1, c2): a round refreshes each once.
	awaitRound := func(what string) {
		t.Helper()
		for n := range 3 {
			select {
			case <-refreshed:
			case <-time.After(testutil.Scaled(10 * time.Second)):
				t.Fatalf("%s: %d of 3 refreshes ended", what, n)
			}
		}
	}
	// The first poll fills the cache (a refresh of each container) and starts the rounds.
	last, lastPod := poll()
	awaitRound("the first poll")
	for i := range 8 {
		// A round a whole interval on: every sample is due.
		ticks <- time.Now().Add(interval)
		awaitRound(fmt.Sprintf("round %d", i))
		before := fake.Calls("ContainerStats")
		got, pod := poll()
		if n := fake.Calls("ContainerStats") - before; n != 0 {
			t.Errorf("poll %d made %d Docker stats calls, want none: the round's samples are fresh", i, n)
		}
		for _, id := range []string{c1, c2} {
			if got[id].Timestamp <= last[id].Timestamp {
				t.Errorf("poll %d: %s has the sample of the poll before (%v)", i, id, got[id])
			}
		}
		if pod <= lastPod {
			t.Errorf("poll %d: the pod has the sample of the poll before", i)
		}
		last, lastPod = got, pod
	}
	select {
	case <-refreshed:
		t.Error("a refresh the rounds did not start: a poll refreshed")
	default:
	}
}
