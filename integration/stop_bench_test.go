//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkStopPodSandbox ends pods the way the kubelet does: the pod's container is stopped
// first (StopContainer, its grace period), then StopPodSandbox is timed, then the pod is
// removed. Ours and upstream v0.4.3 take turns on one private dockerd, with Docker's bridge and
// with CNI (the tests' bridge + host-local chain), each through a proxy that counts their Docker
// calls; it reports each one's mean StopPodSandbox, the ratio, and our Docker calls per stop
// (logged by kind).
//
//	CRI_DOCKERD_UPSTREAM=$(hack/upstream.sh) go test -tags integration -run XXX \
//	  -bench StopPodSandbox -benchtime 20x ./integration/
func BenchmarkStopPodSandbox(b *testing.B) {
	bin := upstreamBinary(b)
	pd := StartPrivateDockerdWith(b, PrivateDockerdOptions{ClampOOMScoreAdj: true}, busyboxImage, pauseImage)
	b.Run("docker-bridge", func(b *testing.B) { benchStopPodSandbox(b, bin, pd, true) })
	b.Run("cni", func(b *testing.B) {
		n := newOwnCNI(b, "stop")
		benchStopPodSandbox(b, bin, pd, true, "--network-plugin=cni", "--cni-conf-dir", n.ConfDir, "--cni-bin-dir", cniBinDir)
	})
	// As crictl stopp does: the container still runs, and StopPodSandbox stops it.
	b.Run("cni-container-running", func(b *testing.B) {
		n := newOwnCNI(b, "stop")
		benchStopPodSandbox(b, bin, pd, false, "--network-plugin=cni", "--cni-conf-dir", n.ConfDir, "--cni-bin-dir", cniBinDir)
	})
}

func benchStopPodSandbox(b *testing.B, bin string, pd *PrivateDockerd, stopContainerFirst bool, flags ...string) {
	oursProxy, theirsProxy := startDockerProxy(b, pd.Host), startDockerProxy(b, pd.Host)
	theirs := startUpstream(b, bin, append(append([]string{"--docker-endpoint", theirsProxy.Host}, benchLogLevel...), flags...)...)
	ours := StartDaemon(b, append(append([]string{"--docker-endpoint", oursProxy.Host}, benchLogLevel...), flags...)...)
	var oursStop, theirsStop time.Duration
	ourCalls := map[string]int{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		oursPod, theirsPod := stopReadyPod(b, ours, stopContainerFirst), stopReadyPod(b, theirs, stopContainerFirst)
		oursProxy.Calls()
		b.StartTimer()
		if i%2 == 0 {
			oursStop += timedStop(b, ours, oursPod)
			theirsStop += timedStop(b, theirs, theirsPod)
		} else {
			theirsStop += timedStop(b, theirs, theirsPod)
			oursStop += timedStop(b, ours, oursPod)
		}
		b.StopTimer()
		for k, n := range oursProxy.Calls() {
			ourCalls[k] += n
		}
		for _, pod := range []struct {
			d  *Daemon
			id string
		}{{ours, oursPod}, {theirs, theirsPod}} {
			if _, err := pod.d.Runtime.RemovePodSandbox(b.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.id}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
	b.ReportMetric(per(oursStop), "ours-stop-s")
	b.ReportMetric(per(theirsStop), "upstream-stop-s")
	b.ReportMetric(float64(oursStop)/float64(theirsStop), "stop-ratio")
	total := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(ourCalls)) {
		total += ourCalls[k]
		kinds = append(kinds, fmt.Sprintf("%s %.1f", k, float64(ourCalls[k])/float64(b.N)))
	}
	b.ReportMetric(float64(total)/float64(b.N), "ours-docker-calls/stop")
	b.Logf("our Docker calls per StopPodSandbox: %s", strings.Join(kinds, ", "))
}

// stopReadyPod runs a pod with one container and, with stopContainer, stops the container as
// the kubelet does before it stops the sandbox; it returns the sandbox's ID.
func stopReadyPod(b *testing.B, d *Daemon, stopContainer bool) string {
	b.Helper()
	cfg := newPodConfig(b, "stop")
	id := runPod(b, d, cfg, "")
	c := createContainer(b, d, id, cfg, containerConfig("c", sleeper))
	startContainer(b, d, c)
	if !stopContainer {
		return id
	}
	if _, err := d.Runtime.StopContainer(b.Context(), &runtimeapi.StopContainerRequest{ContainerId: c, Timeout: 0}); err != nil {
		b.Fatal(err)
	}
	return id
}

func timedStop(b *testing.B, d *Daemon, id string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
