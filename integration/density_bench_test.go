//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkNodeFullOfPods measures what the kubelet's relist costs on a node with many pods,
// ours (the container store) against upstream v0.4.3 and against the raw Docker calls, in one
// run on one private dockerd. For each population in $DENSITY_PODS (default
// "100,250"; each pod is a sandbox and one busybox container, Docker's bridge) it reports, as
// the mean of $DENSITY_CALLS calls (default 20):
//
//   - list-sandboxes-ms, list-containers-ms: ListPodSandbox and ListContainers, ours and
//     upstream's, and their ratio;
//
//   - sweep-ms: one PodSandboxStatus and one ContainerStatus per pod (what the kubelet asks of
//     the pods whose state changed; a full sweep is the worst case), and its ratio;
//
//   - raw-ps-ms, raw-inspect-sweep-ms: `docker ps -a` with our label filter, and an inspect of
//     every container (what a client without a store pays);
//
//   - peak RSS of each daemon (VmHWM) and ours per extra pod between two populations;
//
//   - restart-to-answer-ms: ours and upstream's, from exec to the first ListPodSandbox answered;
//
//   - start16-s: 100 pods started 16 at a time (RunPodSandbox, CreateContainer, StartContainer),
//     wall time, each daemon its own batch, and the ratio.
//
// With $DENSITY_PROFILES set to a directory, ours' heap and goroutine profiles at each
// population are written there (heap-N.pprof, goroutines-N.txt), to see where its RSS goes.
//
//	CRI_DOCKERD_UPSTREAM=$(hack/upstream.sh) go test -tags integration -run XXX \
//	-bench NodeFullOfPods -benchtime 1x -timeout 60m ./integration/
func BenchmarkNodeFullOfPods(b *testing.B) {
	sizes := envInts(b, "DENSITY_PODS", []int{100, 250})
	calls := envInts(b, "DENSITY_CALLS", []int{20})[0]
	bin := upstreamBinary(b)
	pd := StartPrivateDockerdWith(b, PrivateDockerdOptions{ClampOOMScoreAdj: true}, pauseImage, busyboxImage)
	args := append([]string{"--docker-endpoint", pd.Host}, benchLogLevel...)
	ours := StartDaemon(b, append(args, "--metrics-bind-addr", "127.0.0.1:0", "--enable-pprof")...)
	theirs := startUpstream(b, bin, args...)
	ctx := b.Context()

	var pods []densityPod
	var lastRSS int64
	lastSize := 0
	for _, n := range sizes {
		// Grow the population to n pods, through ours, 16 at a time.
		pods = append(pods, startPods(b, ours, n-len(pods), 16, "dens")...)
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			report := func(name string, v float64) { b.ReportMetric(v, name) }
			for _, side := range []struct {
				name string
				d    *Daemon
			}{{"ours", ours}, {"upstream", theirs}} {
				report(side.name+"-list-sandboxes-ms", meanMS(calls, func() {
					if _, err := side.d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil {
						b.Fatal(err)
					}
				}))
				report(side.name+"-list-containers-ms", meanMS(calls, func() {
					if _, err := side.d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
						b.Fatal(err)
					}
				}))
				report(side.name+"-sweep-ms", meanMS(max(1, calls/4), func() {
					for _, p := range pods {
						if _, err := side.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox}); err != nil {
							b.Fatal(err)
						}
						if _, err := side.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.container}); err != nil {
							b.Fatal(err)
						}
					}
				}))
				report(side.name+"-peak-rss-MiB", float64(side.d.peakRSS())/(1<<20))
			}
			report("raw-ps-ms", meanMS(calls, func() {
				if _, err := pd.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "io.kubernetes.docker.type"))}); err != nil {
					b.Fatal(err)
				}
			}))
			report("raw-inspect-sweep-ms", meanMS(max(1, calls/4), func() {
				for _, p := range pods {
					for _, id := range []string{p.sandbox, p.container} {
						if _, err := pd.Client.ContainerInspect(ctx, id); err != nil {
							b.Fatal(err)
						}
					}
				}
			}))
			if dir := os.Getenv("DENSITY_PROFILES"); dir != "" {
				saveProfiles(b, ours, dir, n)
			}
			rss := ours.peakRSS()
			if lastSize > 0 {
				report("ours-rss-KiB-per-extra-pod", float64(rss-lastRSS)/1024/float64(n-lastSize))
			}
			lastRSS, lastSize = rss, n
			for _, side := range []*Daemon{ours, theirs} {
				name := "ours"
				if side == theirs {
					name = "upstream"
				}
				report(name+"-restart-to-answer-ms", restartToAnswer(b, side))
			}
			b.ReportMetric(0, "ns/op")
		})
	}
	// 100 pods started 16 at a time, each daemon its own batch, on an empty node (the private
	// dockerd's bridge has 254 addresses).
	removePods(b, ours, pods)
	b.Run("start-100-by-16", func(b *testing.B) {
		var walls [2]time.Duration
		for i, d := range []*Daemon{ours, theirs, ours, theirs} {
			start := time.Now()
			batch := startPods(b, d, 100, 16, "start")
			walls[i%2] += time.Since(start)
			removePods(b, d, batch)
		}
		b.ReportMetric(walls[0].Seconds()/2, "ours-start16-s")
		b.ReportMetric(walls[1].Seconds()/2, "upstream-start16-s")
		b.ReportMetric(float64(walls[0])/float64(walls[1]), "start16-ratio")
		b.ReportMetric(0, "ns/op")
	})
}

type densityPod struct {
	cfg                *runtimeapi.PodSandboxConfig
	sandbox, container string
}

// startPods starts n one-container pods through d, at most par at a time.
func startPods(b *testing.B, d *Daemon, n, par int, prefix string) []densityPod {
	b.Helper()
	out := make([]densityPod, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		cfg := newPodConfig(b, prefix)
		cfg.LogDirectory = "" // no CRI log files: a node's log traffic is not what is measured
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx := b.Context()
			run, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				errs[i] = err
				return
			}
			ccfg := containerConfig("app", sleeper)
			ccfg.LogPath = ""
			c, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: ccfg, SandboxConfig: cfg})
			if err == nil {
				_, err = d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
			}
			errs[i] = err
			if err == nil {
				out[i] = densityPod{cfg: cfg, sandbox: run.PodSandboxId, container: c.ContainerId}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("pod %d of %d: %v", i, n, err)
		}
	}
	return out
}

// removePods stops and removes pods through d, 16 at a time.
func removePods(b *testing.B, d *Daemon, pods []densityPod) {
	b.Helper()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx := context.WithoutCancel(b.Context())
			if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
				b.Errorf("StopPodSandbox: %v", err)
			}
			if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
				b.Errorf("RemovePodSandbox: %v", err)
			}
		}()
	}
	wg.Wait()
}

// meanMS is the mean wall time of f over n calls, in milliseconds.
func meanMS(n int, f func()) float64 {
	start := time.Now()
	for range n {
		f()
	}
	return float64(time.Since(start).Microseconds()) / 1000 / float64(n)
}

// restartToAnswer stops d and starts it again, timing exec to its first ListPodSandbox answer.
func restartToAnswer(b *testing.B, d *Daemon) float64 {
	b.Helper()
	d.Stop()
	start := time.Now()
	d.Start() // returns once Version answers
	if _, err := d.Runtime.ListPodSandbox(b.Context(), &runtimeapi.ListPodSandboxRequest{}); err != nil {
		b.Fatal(err)
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

// envInts reads a comma-separated list of positive integers from the environment.
func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want positive integers", name, v)
		}
		out = append(out, n)
	}
	return out
}

// saveProfiles writes the daemon's heap profile and goroutine dump, at a population of n pods,
// into dir.
func saveProfiles(b *testing.B, d *Daemon, dir string, n int) {
	b.Helper()
	addr := metricsAddr(b, d)
	_, dump := goroutineDump(b, addr)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	heap, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{fmt.Sprintf("heap-%d.pprof", n): heap, fmt.Sprintf("goroutines-%d.txt", n): []byte(dump)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
