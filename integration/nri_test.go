//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/nri/nritest"
)

// An NRI plugin connected to a real cri-dockerd on a real Docker adjusts a container as it is
// created, and what it set is there inside: an environment variable, a ulimit, a bind mount and
// an annotation. It hears of the pod's and the container's life in order.
func TestNRIPluginAdjustsAContainerOnDocker(t *testing.T) {
	socket := nritest.SocketPath(t)
	d := StartDaemon(t, "--network-plugin=", "--nri-socket", socket, "--nri-plugin-path", t.TempDir())
	ctx := t.Context()
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "file"), []byte("from the plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &nritest.Plugin{Adjust: func(ctr *api.Container) *api.ContainerAdjustment {
		adj := &api.ContainerAdjustment{}
		adj.AddEnv("NRI_SET", "yes")
		adj.AddRlimit("RLIMIT_NOFILE", 2048, 1024)
		adj.AddMount(&api.Mount{Destination: "/mnt/nri", Source: shared, Type: "bind", Options: []string{"rbind", "ro"}})
		adj.AddAnnotation("nri.example/adjusted", "true")
		return adj
	}}
	nritest.Connect(t, p, socket, "10", "adjuster")
	// The plugin hears of what happens once cri-dockerd has synchronized it.
	d.awaitLogLines(0, `plugin \"10-adjuster\" connected and synchronized`)
	podCfg := newPodConfig(t, "nri")
	sandboxID := runPod(t, d, podCfg, "")

	id := createContainer(t, d, sandboxID, podCfg, containerConfig("adjusted", sleeper))
	startContainer(t, d, id)
	out, _, code := execIn(t, d, id, "sh", "-c", `echo "$NRI_SET"; ulimit -Sn; ulimit -Hn; cat /mnt/nri/file; touch /mnt/nri/x 2>/dev/null || echo read-only`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if want := "yes\n1024\n2048\nfrom the plugin" + "read-only\n"; out != want {
		t.Errorf("inside the container:\n%q\nwant\n%q", out, want)
	}
	st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Annotations["nri.example/adjusted"] != "true" {
		t.Errorf("annotations %v: the plugin's is not there", st.Status.Annotations)
	}
	if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, name := range p.Names() {
		if strings.HasSuffix(name, " adjusted") || strings.HasSuffix(name, " "+podCfg.Metadata.Name) {
			got = append(got, strings.Fields(name)[0])
		}
	}
	want := []string{"RunPodSandbox", "CreateContainer", "StopContainer", "RemoveContainer", "CreateContainer", "PostCreateContainer",
		"StartContainer", "PostStartContainer", "StopContainer", "StopPodSandbox", "RemoveContainer", "RemovePodSandbox"}
	if !slices.Equal(got, want) {
		t.Errorf("the plugin heard\n%q\nwant\n%q", got, want)
	}
}

// BenchmarkNRIPodCycle is what NRI costs a pod's whole cycle (RunPodSandbox, CreateContainer,
// StartContainer, StopPodSandbox, RemovePodSandbox): with NRI off, on with no plugin, and on
// with one plugin that hears every event and adjusts nothing. The three run in turn, in a
// rotating order, each on a daemon of its own against the same Docker.
//
//	go test -tags integration -run XXX -bench NRIPodCycle -benchtime=20x ./integration/
func BenchmarkNRIPodCycle(b *testing.B) {
	off := StartDaemon(b, "--network-plugin=", "--nri=false")
	idle := StartDaemon(b, "--network-plugin=", "--nri-socket", nritest.SocketPath(b), "--nri-plugin-path", b.TempDir())
	socket := nritest.SocketPath(b)
	withPlugin := StartDaemon(b, "--network-plugin=", "--nri-socket", socket, "--nri-plugin-path", b.TempDir())
	nritest.Connect(b, &nritest.Plugin{}, socket, "10", "listener")
	withPlugin.awaitLogLines(0, `plugin \"10-listener\" connected and synchronized`)
	ctx := b.Context()
	cycle := func(d *Daemon, total *time.Duration) func() {
		return func() {
			cfg := newPodConfig(b, "nri-bench")
			start := time.Now()
			sandboxID := runPod(b, d, cfg, "")
			startContainer(b, d, createContainer(b, d, sandboxID, cfg, containerConfig("app", sleeper)))
			if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
				b.Fatal(err)
			}
			if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
				b.Fatal(err)
			}
			*total += time.Since(start)
		}
	}
	var offTotal, idleTotal, pluginTotal time.Duration
	paths := []func(){cycle(off, &offTotal), cycle(idle, &idleTotal), cycle(withPlugin, &pluginTotal)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range paths {
			paths[(i+j)%len(paths)]()
		}
	}
	b.StopTimer()
	ms := func(total time.Duration) float64 { return float64(total.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(offTotal), "off-ms/pod")
	b.ReportMetric(ms(idleTotal), "no-plugin-ms/pod")
	b.ReportMetric(ms(pluginTotal), "one-plugin-ms/pod")
	b.ReportMetric(float64(idleTotal)/float64(offTotal), "no-plugin-ratio")
	b.ReportMetric(float64(pluginTotal)/float64(offTotal), "one-plugin-ratio")
}
