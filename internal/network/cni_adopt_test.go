package network

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// writeCache writes a libcni cache entry as libcni's ADD does (kind cniCacheV1).
func writeCache(t *testing.T, cacheDir, netName, id, ifName string, config string, caps map[string]any, result map[string]any) {
	t.Helper()
	entry := map[string]any{
		"kind": "cniCacheV1", "containerId": id, "config": []byte(config), "ifName": ifName, "networkName": netName,
		"cniArgs":        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web"}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
		"capabilityArgs": caps, "result": result,
	}
	b, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cacheDir, "results")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, netName+"-"+id+"-"+ifName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAdoptReadsWhatUpstreamsADDCached(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-now.conflist", bridgeConflist("now"))
	cacheDir := t.TempDir()
	c := e.start(t, CNIOptions{CacheDir: cacheDir})
	c.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, cacheDir, nil)
	id := "4f1c0a5e9d2b"
	// Upstream's two ADDs: its network on eth0 (ipRanges with an empty subnet when the kubelet
	// sent no pod CIDR), and its loopback network on lo.
	writeCache(t, cacheDir, "upstream-net", id, "eth0", bridgeConflist("upstream-net"),
		map[string]any{
			"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""}},
			"ipRanges":     [][]map[string]string{{{"subnet": ""}}},
			"bandwidth":    map[string]any{"ingressRate": 1000000, "ingressBurst": 2147483647},
		},
		map[string]any{"cniVersion": "1.0.0", "interfaces": []map[string]any{{"name": "eth0", "sandbox": "/proc/1/ns/net"}},
			"ips": []map[string]any{{"address": "10.88.0.42/16", "interface": 0}}})
	writeCache(t, cacheDir, upstreamLoopbackNetwork, id, "lo", `{"cniVersion":"0.2.0","name":"cni-loopback","plugins":[{"type":"loopback"}]}`, nil, nil)

	// Running: the IPs read from the namespace win; the port mappings of upstream's checkpoint.
	pm := []PortMapping{{HostPort: 9090, ContainerPort: 90, Protocol: "TCP"}, {ContainerPort: 91}}
	att, warnings := c.Adopt(Pod{SandboxID: id, Namespace: "default", Name: "web", PortMappings: pm}, []string{"10.88.0.42"})
	if att == nil || len(warnings) != 0 {
		t.Fatalf("Adopt = %+v, %v", att, warnings)
	}
	if att.Network != "upstream-net" || att.IfName != "eth0" || !slices.Equal(att.IPs, []string{"10.88.0.42"}) {
		t.Errorf("attachment %+v", att)
	}
	if want := []PortMapping{{HostPort: 9090, ContainerPort: 90, Protocol: "tcp"}}; !slices.Equal(att.PortMappings, want) {
		t.Errorf("port mappings %+v, want %+v", att.PortMappings, want)
	}
	if att.Bandwidth == nil || att.Bandwidth.IngressRate != 1000000 || len(att.PodCIDRs) != 0 {
		t.Errorf("bandwidth %+v, pod CIDRs %v", att.Bandwidth, att.PodCIDRs)
	}
	// The DEL finds the cached config under the adopted network's name.
	if list, err := c.listFor(att, c.runtimeConf(att, "")); err != nil || list == nil || list.Name != "upstream-net" {
		t.Errorf("config for the DEL: %v, %v", list, err)
	}

	// Not running, upstream's checkpoint gone: IPs from the cached result, mappings from the
	// cached capability arguments.
	att, _ = c.Adopt(Pod{SandboxID: id}, nil)
	if att == nil || !slices.Equal(att.IPs, []string{"10.88.0.42"}) || len(att.PortMappings) != 1 || att.PortMappings[0].HostPort != 8080 {
		t.Errorf("from the cache alone: %+v", att)
	}
	// Nor the pod's name (Docker no longer has the sandbox): the cached CNI_ARGS give it.
	if att == nil || att.Namespace != "default" || att.Name != "web" {
		t.Errorf("pod from the cached CNI_ARGS: %+v", att)
	}

	// Nothing cached: the IPs still count, the DEL falls back to the current network, with a
	// warning; without IPs there is nothing to adopt.
	att, warnings = c.Adopt(Pod{SandboxID: "other"}, []string{"10.88.0.43"})
	if att == nil || att.Network != "now" || len(warnings) != 1 {
		t.Errorf("nothing cached: %+v, %v", att, warnings)
	}
	if att, _ = c.Adopt(Pod{SandboxID: "other"}, nil); att != nil {
		t.Errorf("nothing cached and no IP: adopted %+v", att)
	}
}

func TestGlobalIPsIPv4First(t *testing.T) {
	addrs := []net.Addr{
		&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		&net.IPNet{IP: net.ParseIP("fd00::7"), Mask: net.CIDRMask(64, 128)},
		&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
		&net.IPNet{IP: net.ParseIP("10.88.0.7").To4(), Mask: net.CIDRMask(16, 32)},
	}
	if got := globalIPs(addrs); !slices.Equal(got, []string{"10.88.0.7", "fd00::7"}) {
		t.Errorf("globalIPs = %v", got)
	}
}

func TestNamespaceIPsOfThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("setns needs Linux and root")
	}
	// The loopback of our own namespace has no global address; the call must come back to
	// this namespace (a second call works the same).
	for i := 0; i < 2; i++ {
		ips, err := NamespaceIPs("/proc/self/ns/net", "lo")
		if err != nil || len(ips) != 0 {
			t.Fatalf("NamespaceIPs(lo) = %v, %v", ips, err)
		}
	}
	if _, err := NamespaceIPs("/proc/self/ns/net", "no-such-if0"); err == nil {
		t.Error("a missing interface gave no error")
	}
}
