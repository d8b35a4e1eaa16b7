//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkpointDamages are the ways a sandbox checkpoint is found lost after a restart.
var checkpointDamages = []struct {
	name   string
	damage func(path string) error
}{
	{"truncated", func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(path, b[:len(b)/2], 0o600)
	}},
	{"garbage", func(path string) error {
		garbage := make([]byte, 512)
		for i := range garbage {
			garbage[i] = byte(i*131 + 7)
		}
		return os.WriteFile(path, garbage, 0o600)
	}},
	{"empty", func(path string) error { return os.Truncate(path, 0) }},
	{"missing", os.Remove},
}

// TestLostCheckpointKeepsThePodIPAndItsStopReleasesTheLease: four running pods (a container
// each, a hostPort each) on a CNI network of the test's own, with libcni's cache in a directory
// of its own; each pod's checkpoint is truncated, garbage-filled, emptied or deleted, then
// cri-dockerd restarts. PodSandboxStatus reports each pod's original IP (from libcni's cache),
// StopPodSandbox succeeds and releases the pod's host-local lease and cache entry (twice: the
// second has nothing to do), and after the removal nothing is left: no lease, veth, NAT rule,
// checkpoint, pin or cache entry.
func TestLostCheckpointKeepsThePodIPAndItsStopReleasesTheLease(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		t.Fatalf("the CNI reference plugins are not installed (run hack/docker.sh): %v", err)
	}
	pd := ownDockerd(t)
	n := newOwnCNI(t, "ckpt")
	pods := newKubeletPods(t, "ckpt", pd.Client)
	cacheDir := t.TempDir()
	d := StartDaemon(t, "--docker-endpoint", pd.Host, "--network-plugin=cni", "--cni-conf-dir", n.ConfDir, "--cni-bin-dir", cniBinDir, "--cni-cache-dir", cacheDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	type pod struct {
		cfg     *runtimeapi.PodSandboxConfig
		id, ip  string
		damaged string
	}
	var all []*pod
	var cfgs []*runtimeapi.PodSandboxConfig
	var ids []string
	for _, dmg := range checkpointDamages {
		cfg := pods.Pod(t, dmg.name)
		cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: int32(freeHostPort(t))}}
		p := &pod{cfg: cfg, id: runPod(t, d, cfg, ""), damaged: dmg.name}
		ctr := createContainer(t, d, p.id, cfg, pods.Container(t, cfg, "app"))
		startContainer(t, d, ctr)
		p.ip = sandboxIP(t, d, p.id)
		if owner := n.Leases(t)[p.ip]; p.ip == "" || owner != p.id {
			t.Fatalf("pod %s: IP %q, leased to %q", dmg.name, p.ip, owner)
		}
		all, cfgs, ids = append(all, p), append(cfgs, cfg), append(ids, p.id, ctr)
	}
	for i, dmg := range checkpointDamages {
		if err := dmg.damage(filepath.Join(d.Dir, "root", "sandboxes", all[i].id+".json")); err != nil {
			t.Fatal(err)
		}
	}
	d.Restart()

	for i := 0; i < 3; i++ {
		for _, p := range all {
			if ip := sandboxIP(t, d, p.id); ip != p.ip {
				t.Errorf("checkpoint %s: after the restart PodSandboxStatus %d IP %q, want %q", p.damaged, i+1, ip, p.ip)
			}
		}
	}
	// Each rebuild is logged once, with the pod's name.
	for _, p := range all {
		pod := "pod=" + p.cfg.Metadata.Namespace + "/" + p.cfg.Metadata.Name
		if n := countLogLines(d.readLog(), "rebuilt the network checkpoint", p.id, pod); n != 1 {
			t.Errorf("checkpoint %s: the rebuild logged %d times with %s, want once", p.damaged, n, pod)
		}
		for _, line := range strings.Split(d.readLog(), "\n") {
			if strings.Contains(line, "rebuilt the network checkpoint") && strings.Contains(line, p.id) {
				t.Logf("checkpoint %s: %s", p.damaged, line)
			}
		}
	}
	for _, p := range all {
		for i := 0; i < 2; i++ {
			if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
				t.Errorf("checkpoint %s: StopPodSandbox %d: %v", p.damaged, i+1, err)
			}
		}
		if owner, ok := n.Leases(t)[p.ip]; ok {
			t.Errorf("checkpoint %s: after StopPodSandbox %s is still leased to %.12s", p.damaged, p.ip, owner)
		}
		if cached, _ := filepath.Glob(filepath.Join(cacheDir, "results", "*-"+p.id+"-*")); len(cached) > 0 {
			t.Errorf("checkpoint %s: libcni's cache entries left after StopPodSandbox: %v", p.damaged, cached)
		}
	}
	pods.kubeletCleanup(t, d)
	pods.checkNothingLeftOf(t, d, n, cfgs, ids, "after the kubelet's cleanup")
	if entries, _ := os.ReadDir(filepath.Join(cacheDir, "results")); len(entries) > 0 {
		t.Errorf("libcni's cache entries left: %d", len(entries))
	}
}

// countLogLines counts the lines of log that hold every one of words.
func countLogLines(log string, words ...string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}
