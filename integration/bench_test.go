//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
)

// BenchmarkPodStartOverhead compares starting a one-container pod through cri-dockerd
// (RunPodSandbox + CreateContainer + StartContainer) with the same Docker calls made directly
// (create+start of the pause container, create+start of a busybox container joining its
// network and IPC namespaces). Cleanup is not timed. The two paths alternate in order, so
// neither always runs on a warmer daemon.
//
//	go test -tags integration -run XXX -bench PodStartOverhead -benchtime=20x ./integration/
func BenchmarkPodStartOverhead(b *testing.B) {
	d := StartDaemon(b)
	ctx := b.Context()
	var criTotal, dockerTotal time.Duration

	viaCRI := func() {
		cfg := newPodConfig(b, "bench-cri")
		start := time.Now()
		sandboxID := runPod(b, d, cfg, "")
		ctrID := createContainer(b, d, sandboxID, cfg, containerConfig("app", sleeper))
		startContainer(b, d, ctrID)
		criTotal += time.Since(start)
		b.StopTimer()
		removePodContainers(b, cfg.Metadata)
		b.StartTimer()
	}
	viaDocker := func() {
		cfg := newPodConfig(b, "bench-docker")
		m := cfg.Metadata
		start := time.Now()
		// What cri-dockerd asks for a sandbox on the default handler (see internal/core/sandbox_run.go);
		// OomScoreAdj is left at 0, what cri-dockerd clamps -998 to on nodes without
		// CAP_SYS_RESOURCE such as the CI VMs.
		sandbox := mustCreate(b, ctx, "k8s_POD_"+m.Name+"_"+m.Namespace+"_"+m.Uid+"_0",
			&container.Config{Image: pauseImage, Labels: map[string]string{"io.kubernetes.docker.type": "podsandbox"}},
			&container.HostConfig{NetworkMode: "default", IpcMode: container.IPCModeShareable, RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled}})
		mustCreate(b, ctx, "k8s_app_"+m.Name+"_"+m.Namespace+"_"+m.Uid+"_0",
			&container.Config{Image: busyboxImage, Entrypoint: strslice.StrSlice{"sh", "-c", sleeper}, Labels: map[string]string{"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": sandbox}},
			&container.HostConfig{NetworkMode: container.NetworkMode("container:" + sandbox), IpcMode: container.IpcMode("container:" + sandbox)})
		dockerTotal += time.Since(start)
		b.StopTimer()
		removePodContainers(b, m)
		b.StartTimer()
	}

	alternate(b, viaCRI, viaDocker, &criTotal, &dockerTotal)
}

// mustCreate creates and starts a container with the Docker client and returns its ID.
func mustCreate(b *testing.B, ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) string {
	b.Helper()
	c, err := suite.docker.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		b.Fatalf("docker create %s: %v", name, err)
	}
	if err := suite.docker.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatalf("docker start %s: %v", name, err)
	}
	return c.ID
}

// alternate runs the path through cri-dockerd and the raw Docker path b.N times each, in
// alternating order so that neither always runs on a warmer daemon, and reports the mean time
// of each (the paths add their own time to the totals, cleanup excluded) and their ratio.
func alternate(b *testing.B, viaCRI, viaDocker func(), criTotal, dockerTotal *time.Duration) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			viaCRI()
			viaDocker()
		} else {
			viaDocker()
			viaCRI()
		}
	}
	b.StopTimer()
	ms := func(total time.Duration) float64 { return float64(total.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(*criTotal), "cri-ms/op")
	b.ReportMetric(ms(*dockerTotal), "docker-ms/op")
	b.ReportMetric(float64(*criTotal)/float64(*dockerTotal), "overhead-ratio")
}
