//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A node that swaps upstream cri-dockerd for ours while pods keep running. The test plays
// upstream's part itself, as upstream's source does it: the pause container with upstream's
// name and labels and NetworkMode none, the CNI ADDs through libcni (the pod's network on eth0
// and upstream's "cni-loopback" network on lo, cached in the cache directory the daemon under
// test then uses) and upstream's checkpoint in <root>/sandbox/<id>.

const (
	migNetwork = "crid-it-mig" // host-local leases in /var/lib/cni/networks/crid-it-mig
	migBridge  = "crid-itm0"
	migSubnet  = "10.131.0.0/16" // no other bridge of this machine routes it
	// upstream's loopback network (network/cni/cni_others.go, getLoNetwork)
	migLoopback = `{"cniVersion": "0.2.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}`
)

// upstreamPod is a pod as upstream cri-dockerd left it on the node.
type upstreamPod struct {
	id       string
	hostPort int
	cni      *libcni.CNIConfig
	lists    []*libcni.NetworkConfigList // the pod's network, upstream's loopback network
	ifNames  []string
}

// runtimeConf is what upstream's buildCNIRuntimeConf passed (no K8S_POD_UID; portMappings and
// ipRanges always, the latter with an empty subnet when the kubelet sent no pod CIDR).
func (p *upstreamPod) runtimeConf(cfg *runtimeapi.PodSandboxConfig, netns, ifName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.id, NetNS: netns, IfName: ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", cfg.Metadata.Namespace},
			{"K8S_POD_NAME", cfg.Metadata.Name}, {"K8S_POD_INFRA_CONTAINER_ID", p.id},
		},
		CapabilityArgs: map[string]any{
			"portMappings": []map[string]any{{"hostPort": p.hostPort, "containerPort": 8080, "protocol": "tcp", "hostIP": ""}},
			"ipRanges":     [][]map[string]string{{{"subnet": ""}}},
		},
	}
}

// startUpstreamPod creates and starts the pause container as upstream does, runs upstream's two
// CNI ADDs and writes upstream's checkpoint under root. Its cleanup runs the DELs from the cache
// should the test end before cri-dockerd did them.
func startUpstreamPod(t *testing.T, cfg *runtimeapi.PodSandboxConfig, root, confDir, cacheDir string) *upstreamPod {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{
		"io.kubernetes.docker.type": "podsandbox", "io.kubernetes.container.name": "POD",
		"annotation.kubernetes.io/config.source": "api",
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	m := cfg.Metadata
	name := fmt.Sprintf("k8s_POD_%s_%s_%s_%d", m.Name, m.Namespace, m.Uid, m.Attempt)
	created, err := suite.docker.ContainerCreate(ctx, &container.Config{Image: pauseImage, Labels: labels, Hostname: m.Name},
		&container.HostConfig{NetworkMode: "none", IpcMode: "shareable"}, nil, nil, name)
	if err != nil {
		t.Fatalf("create upstream's sandbox: %v", err)
	}
	if err := suite.docker.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start upstream's sandbox: %v", err)
	}
	c, err := suite.docker.ContainerInspect(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	p := &upstreamPod{id: created.ID, hostPort: freeHostPort(t), cni: libcni.NewCNIConfigWithCacheDir([]string{cniBinDir}, cacheDir, nil)}
	raw, err := os.ReadFile(filepath.Join(confDir, "10-mig.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, conf := range []string{string(raw), migLoopback} {
		list, err := libcni.NetworkConfFromBytes([]byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		p.lists = append(p.lists, list)
	}
	p.ifNames = []string{"eth0", "lo"}
	t.Cleanup(func() { p.delFromCache(t, cfg) })
	netns := fmt.Sprintf("/proc/%d/ns/net", c.State.Pid)
	for i, list := range p.lists {
		if _, err := p.cni.AddNetworkList(ctx, list, p.runtimeConf(cfg, netns, p.ifNames[i])); err != nil {
			t.Fatalf("CNI ADD %s: %v", list.Name, err)
		}
	}
	// Upstream's checkpoint (core/docker_checkpoint.go, store/checkpointmanager.go).
	checkpoint := fmt.Sprintf(`{"version":"v1","name":%q,"namespace":%q,"data":{"port_mappings":[{"protocol":"tcp","container_port":8080,"host_port":%d}]},"checksum":1234567890}`,
		m.Name, m.Namespace, p.hostPort)
	if err := os.MkdirAll(filepath.Join(root, "sandbox"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sandbox", p.id), []byte(checkpoint), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cached lists the CNI cache entries of the pod.
func (p *upstreamPod) cached(t testing.TB) []string {
	t.Helper()
	atts, err := p.cni.GetCachedAttachments(p.id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range atts {
		out = append(out, a.Network+"/"+a.IfName)
	}
	return out
}

// delFromCache runs, best effort, the DEL of whatever the cache still holds of the pod.
func (p *upstreamPod) delFromCache(t *testing.T, cfg *runtimeapi.PodSandboxConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	netns := ""
	if c, err := suite.docker.ContainerInspect(ctx, p.id); err == nil && c.State != nil && c.State.Running {
		netns = fmt.Sprintf("/proc/%d/ns/net", c.State.Pid)
	}
	for i, list := range p.lists {
		rt := p.runtimeConf(cfg, netns, p.ifNames[i])
		if raw, _, err := p.cni.GetNetworkListCachedConfig(list, rt); err != nil || len(raw) == 0 {
			continue
		}
		if err := p.cni.DelNetworkList(ctx, list, rt); err != nil {
			t.Logf("cleanup: CNI DEL %s of %s: %v", list.Name, p.id, err)
		}
	}
}

// natRules counts the NAT rules (portmap's DNAT chains and rules, the bridge's masquerade) that
// name sandbox id.
func natRules(t testing.TB, id string) int {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	return strings.Count(string(out), id)
}

func TestMigrationFromUpstreamCNIPodKeepsItsIPAndTearsDownItsNetwork(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		t.Fatalf("CNI plugins missing (%v); hint: %s", err, setupHint)
	}
	ctx := t.Context()
	confDir := cniConfDir(t, map[string]string{"10-mig.conflist": cniConflist(migNetwork, migBridge, migSubnet)})
	cacheDir, err := os.MkdirTemp("", "crid-it-cnicache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cacheDir) })
	d := NewDaemon(t, "--network-plugin=cni", "--cni-conf-dir", confDir, "--cni-bin-dir", cniBinDir, "--cni-cache-dir", cacheDir)
	root := filepath.Join(d.Dir, "root")
	// Whatever happens, no pin outlives the test (the daemon's directory is removed after it).
	t.Cleanup(func() {
		entries, _ := os.ReadDir(filepath.Join(root, "netns"))
		for _, e := range entries {
			_ = syscall.Unmount(filepath.Join(root, "netns", e.Name()), syscall.MNT_DETACH)
		}
	})

	cfg := newPodConfig(t, "mig")
	pod := startUpstreamPod(t, cfg, root, confDir, cacheDir)
	lease := leases(t, migNetwork, pod.id)
	if len(lease) != 1 || natRules(t, pod.id) == 0 {
		t.Fatalf("upstream's ADD: leases %v, %d NAT rules", lease, natRules(t, pod.id))
	}
	if got := pod.cached(t); len(got) != 2 {
		t.Fatalf("CNI cache after upstream's ADDs: %v", got)
	}

	d.Start()
	if !strings.Contains(d.readLog(), "adopted a pod sandbox of upstream cri-dockerd") {
		t.Errorf("no adoption logged at the start")
	}
	if ip := sandboxIP(t, d, pod.id); ip != lease[0] {
		t.Fatalf("PodSandboxStatus IP %q, want the pod's lease %s", ip, lease[0])
	}
	for _, f := range []string{filepath.Join(root, "sandboxes", pod.id+".json"), filepath.Join(root, "netns", pod.id)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after the adoption: %v", err)
		}
	}
	// A container of the pod, created through CRI, works in the pod's network: its eth0 is the
	// address reported, and it serves on the host port upstream's portmap published.
	marker := "adopted-" + randHex()
	httpd := createContainer(t, d, pod.id, cfg, containerConfig("httpd", "mkdir -p /www && echo "+marker+" > /www/index.html && trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait"))
	startContainer(t, d, httpd)
	if inside := podIPInside(t, d, httpd); inside != lease[0] {
		t.Errorf("`ip addr` in the pod %s, PodSandboxStatus %s", inside, lease[0])
	}
	if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/", pod.hostPort)); !strings.Contains(body, marker) {
		t.Errorf("host port %d answered %q", pod.hostPort, body)
	}

	// A restart between the adoption and the stop: the checkpoint of ours is what counts now.
	d.Restart()
	if ip := sandboxIP(t, d, pod.id); ip != lease[0] {
		t.Errorf("after a restart PodSandboxStatus IP %q, want %s", ip, lease[0])
	}
	if n := strings.Count(d.readLog(), "adopted a pod sandbox of upstream cri-dockerd"); n != 1 {
		t.Errorf("adopted %d times, want once", n)
	}
	if info, err := d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.id}); err != nil || info.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("status after the restart: %v, %v", info, err)
	}

	if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if l := leases(t, migNetwork, pod.id); len(l) != 0 {
		t.Errorf("after the stop the pod still holds %v", l)
	}
	if n := natRules(t, pod.id); n != 0 {
		t.Errorf("%d NAT rules of the stopped pod left (host port %d)", n, pod.hostPort)
	}
	if got := pod.cached(t); len(got) != 0 {
		t.Errorf("CNI cache entries left after the stop: %v", got)
	}
	if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	for _, f := range []string{filepath.Join(root, "sandboxes", pod.id+".json"), filepath.Join(root, "sandbox", pod.id), filepath.Join(root, "netns", pod.id)} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s after RemovePodSandbox: %v", f, err)
		}
	}
	if list := podContainers(t, cfg.Metadata); len(list) != 0 {
		t.Errorf("%d containers of the pod left", len(list))
	}
}
