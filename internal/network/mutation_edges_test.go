package network

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// The bandwidth limits are inclusive: 1k and 1P bits per second are accepted.
func TestBandwidthLimitsAreInclusive(t *testing.T) {
	for value, ok := range map[string]bool{"1k": true, "1000": true, "999": false, "1P": true, "1000000000000001": false} {
		_, err := BandwidthFromAnnotations(map[string]string{IngressBandwidthAnnotation: value})
		if (err == nil) != ok {
			t.Errorf("ingress bandwidth %s: %v, want accepted %v", value, err, ok)
		}
	}
}

// An address on a host-side interface of the result (the bridge, index 0 here) is not the
// pod's; one on no interface, or on an index the result does not list, is.
func TestPodIPsSkipHostInterfacesFromIndexZero(t *testing.T) {
	zero, one, two := 0, 1, 2
	ip := func(s string, iface *int) *types100.IPConfig {
		addr, n, _ := net.ParseCIDR(s)
		n.IP = addr
		return &types100.IPConfig{Address: *n, Interface: iface}
	}
	res := &types100.Result{CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: "cni0"}, {Name: "eth0", Sandbox: "/proc/1/ns/net"}},
		IPs:        []*types100.IPConfig{ip("10.88.0.1/16", &zero), ip("fd00::5/64", &one), ip("10.88.0.5/16", &one), ip("10.88.0.6/16", nil), ip("10.88.0.7/16", &two)},
	}
	got, err := podIPs(res)
	// An index past the interfaces names none of the host's: the address is the pod's.
	if want := []string{"10.88.0.5", "10.88.0.6", "10.88.0.7", "fd00::5"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("podIPs = %v, %v; want %v", got, err, want)
	}
}

// Capability arguments are passed only when the pod has them.
func TestRuntimeConfHasOnlyTheCapabilitiesThePodHas(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	rt := c.runtimeConf(&Attachment{SandboxID: "abc", IfName: "eth0"}, "/netns")
	if len(rt.CapabilityArgs) != 0 {
		t.Errorf("a pod without port mappings, bandwidth, DNS or pod CIDRs got capability args %v", rt.CapabilityArgs)
	}
	rt = c.runtimeConf(&Attachment{PortMappings: []PortMapping{{HostPort: 80, ContainerPort: 8080, Protocol: "tcp"}}, PodCIDRs: []string{"10.244.0.0/24"}}, "/netns")
	if _, ok := rt.CapabilityArgs["portMappings"]; !ok {
		t.Errorf("no portMappings in %v", rt.CapabilityArgs)
	}
	if _, ok := rt.CapabilityArgs["ipRanges"]; !ok {
		t.Errorf("no ipRanges in %v", rt.CapabilityArgs)
	}
}

// MTU 0 leaves every plugin's config as the file has it.
func TestCNIMTUZeroKeepsTheConfigs(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	att, err := c.Plan(Pod{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range att.plan.(*loadedNetwork).list.Plugins {
		if strings.Contains(string(p.Bytes), `"mtu"`) {
			t.Errorf("plugin %s config %s: an mtu was set with MTU 0", p.Network.Type, p.Bytes)
		}
	}
}

// Of a sandbox's cached ADDs, the one of the current network is adopted; mappings without a
// protocol are TCP; a cached bandwidth of zeros is no bandwidth.
func TestAdoptPrefersTheCurrentNetworkAndNormalizesTheCache(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-now.conflist", bridgeConflist("now"))
	cacheDir := t.TempDir()
	c := e.start(t, CNIOptions{CacheDir: cacheDir})
	c.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, cacheDir, nil)
	id := "5e2b7c9a1d4f"
	result := map[string]any{"cniVersion": "1.0.0", "interfaces": []map[string]any{{"name": "eth0", "sandbox": "/proc/1/ns/net"}},
		"ips": []map[string]any{{"address": "10.88.0.42/16", "interface": 0}}}
	// Cached ADDs of other networks sort before and after it: the current network wins.
	writeCache(t, cacheDir, "another", id, "eth0", bridgeConflist("another"), nil, result)
	writeCache(t, cacheDir, "now", id, "eth0", bridgeConflist("now"),
		map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80}}, "bandwidth": map[string]any{}}, result)
	writeCache(t, cacheDir, "zzz", id, "eth0", bridgeConflist("zzz"), nil, result)
	att, _ := c.Adopt(Pod{SandboxID: id}, nil)
	if att == nil || att.Network != "now" {
		t.Fatalf("adopted %+v, want network now", att)
	}
	if want := []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}; !slices.Equal(att.PortMappings, want) {
		t.Errorf("port mappings %+v, want %+v", att.PortMappings, want)
	}
	if att.Bandwidth != nil {
		t.Errorf("bandwidth %+v from a cached empty one, want none", att.Bandwidth)
	}
}

// A DEL uses the config its ADD planned, even after the file changed; without a plan or a
// cache, the current config only when it is the same network.
func TestListForPrefersThePlanAndOnlyTheSameNetwork(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	att, err := c.Plan(Pod{})
	if err != nil {
		t.Fatal(err)
	}
	e.write(t, "10-test.conflist", `{"cniVersion": "1.0.0", "name": "testnet", "plugins": [{"type": "bridge", "bridge": "cni1"}]}`)
	eventually(t, "the changed config", func() bool {
		a, err := c.Plan(Pod{})
		return err == nil && len(a.plan.(*loadedNetwork).list.Plugins) == 1
	})
	if list, err := c.listFor(att, nil); err != nil || list == nil || len(list.Plugins) != 3 {
		t.Errorf("config for the planned DEL: %v, %v; want the planned one (3 plugins)", list, err)
	}
	if list, err := c.listFor(&Attachment{Network: "testnet"}, nil); err != nil || list == nil || len(list.Plugins) != 1 {
		t.Errorf("config for an unplanned DEL on the current network: %v, %v", list, err)
	}
	if list, err := c.listFor(&Attachment{Network: "gone"}, nil); err != nil || list != nil {
		t.Errorf("config for a DEL on another network: %v, %v; want none", list, err)
	}
}

// A cached config without plugins (libcni reads it, to load them from elsewhere) is no config
// for a DEL: the current config of the same network stands in.
func TestListForSkipsACachedConfigWithoutPlugins(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	rt := &libcni.RuntimeConf{ContainerID: "sandbox1", NetNS: "/proc/1/ns/net", IfName: "eth0"}
	e.fake.mu.Lock()
	e.fake.cache[cacheKey("testnet", rt)] = []byte(`{"cniVersion": "1.0.0", "name": "testnet"}`)
	e.fake.mu.Unlock()
	if list, err := c.listFor(&Attachment{Network: "testnet"}, rt); err != nil || list == nil || len(list.Plugins) != 3 {
		t.Errorf("config for the DEL: %v, %v; want the current one (3 plugins)", list, err)
	}
}

// NewCNI without a logger logs to logrus's standard logger.
func TestNewCNIWithoutALogger(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c, err := NewCNI(CNIOptions{ConfDir: e.confDir, BinDirs: []string{e.binDir}, CNI: e.fake})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
