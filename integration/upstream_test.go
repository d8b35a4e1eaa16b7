//go:build integration

package integration

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// upstreamBinary is upstream cri-dockerd's binary for the benchmarks that compare with it in
// the same run: $CRI_DOCKERD_UPSTREAM, which `make bench` sets from hack/upstream.sh.
func upstreamBinary(b *testing.B) string {
	b.Helper()
	bin := os.Getenv("CRI_DOCKERD_UPSTREAM")
	if bin == "" {
		b.Skip("CRI_DOCKERD_UPSTREAM is not set (make bench sets it: hack/upstream.sh builds upstream v0.4.3)")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("CRI_DOCKERD_UPSTREAM: %v", err)
	}
	return bin
}

// startUpstream starts upstream cri-dockerd with the harness's flags, which it shares with ours
// (the socket, root directory, Docker endpoint, no network plugin: Docker's bridge).
func startUpstream(b *testing.B, bin string, args ...string) *Daemon {
	b.Helper()
	d := NewDaemon(b, args...)
	d.Binary = bin
	d.Start()
	return d
}

// benchLogLevel keeps both daemons' logging at what nodes run (the harness's default is debug).
var benchLogLevel = []string{"--log-level", "info"}

// BenchmarkConcurrentRunPodSandbox starts N pods at once (RunPodSandbox only, Docker's bridge,
// like the kubelet's pod workers after a node reboot), through ours and through upstream v0.4.3 on
// the same private dockerd (upstream's sandboxes need ClampOOMScoreAdj on this VM, and ours run
// with the same runtime), alternating which goes first. It reports each one's wall time for the batch
// and their ratio; stopping and removing the batch (also concurrent) is reported apart. N is
// $CONCURRENT_PODS, 200 by default.
//
//	CRI_DOCKERD_UPSTREAM=$(hack/upstream.sh) go test -tags integration -run XXX \
//	  -bench ConcurrentRunPodSandbox -benchtime 1x ./integration/
func BenchmarkConcurrentRunPodSandbox(b *testing.B) {
	n := 200
	if v := os.Getenv("CONCURRENT_PODS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("CONCURRENT_PODS=%q", v)
		}
	}
	bin := upstreamBinary(b)
	pd := StartPrivateDockerdWith(b, PrivateDockerdOptions{ClampOOMScoreAdj: true}, pauseImage)
	args := append([]string{"--docker-endpoint", pd.Host}, benchLogLevel...)
	theirs := startUpstream(b, bin, args...)
	ours := StartDaemon(b, args...)
	var oursRun, theirsRun, oursRemove, theirsRemove time.Duration
	batch := func(d *Daemon, run, remove *time.Duration) {
		r, rm := concurrentPods(b, d, n)
		*run += r
		*remove += rm
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			batch(ours, &oursRun, &oursRemove)
			batch(theirs, &theirsRun, &theirsRemove)
		} else {
			batch(theirs, &theirsRun, &theirsRemove)
			batch(ours, &oursRun, &oursRemove)
		}
	}
	b.StopTimer()
	s := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
	b.ReportMetric(s(oursRun), "ours-run-s")
	b.ReportMetric(s(theirsRun), "upstream-run-s")
	b.ReportMetric(float64(oursRun)/float64(theirsRun), "run-ratio")
	b.ReportMetric(s(oursRemove), "ours-remove-s")
	b.ReportMetric(s(theirsRemove), "upstream-remove-s")
	b.ReportMetric(float64(oursRemove)/float64(theirsRemove), "remove-ratio")
}

// concurrentPods runs n pods at once through d and then stops and removes them all at once,
// failing the benchmark on any error; it returns the two batches' wall times.
func concurrentPods(b *testing.B, d *Daemon, n int) (run, remove time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	cfgs := make([]*runtimeapi.PodSandboxConfig, n)
	for i := range cfgs {
		cfgs[i] = newPodConfig(b, "conc")
	}
	ids := make([]string, n)
	errs := make([]error, n)
	all := func(f func(i int)) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); f(i) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				b.Fatalf("pod %d: %v", i, err)
			}
		}
		return time.Since(start)
	}
	run = all(func(i int) {
		resp, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfgs[i]})
		if err == nil {
			ids[i] = resp.PodSandboxId
		}
		errs[i] = err
	})
	remove = all(func(i int) {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			errs[i] = err
			return
		}
		_, errs[i] = d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ids[i]})
	})
	return run, remove
}
