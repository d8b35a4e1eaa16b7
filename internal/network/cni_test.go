package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// fakeCNI stands in for libcni: it records each ADD and DEL with the config list and runtime
// config it got, answers ADD with a bridge-like result, and keeps a cache like libcni's.
type fakeCNI struct {
	mu     sync.Mutex
	calls  []fakeCall
	addErr error
	delErr error
	cache  map[string][]byte // network/container/ifname -> config bytes
}

type fakeCall struct {
	op   string
	list *libcni.NetworkConfigList
	rt   libcni.RuntimeConf
}

func newFakeCNI() *fakeCNI { return &fakeCNI{cache: map[string][]byte{}} }

func cacheKey(network string, rt *libcni.RuntimeConf) string {
	return network + "/" + rt.ContainerID + "/" + rt.IfName
}

func (f *fakeCNI) AddNetworkList(_ context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (cnitypes.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{"ADD", list, *rt})
	if f.addErr != nil {
		return nil, f.addErr
	}
	f.cache[cacheKey(list.Name, rt)] = list.Bytes
	zero, two := 0, 2
	return &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: "cni0"}, {Name: "veth1"}, {Name: rt.IfName, Sandbox: rt.NetNS}},
		IPs: []*types100.IPConfig{
			{Interface: &zero, Address: mustCIDR("10.88.0.1/16")}, // the bridge's gateway address
			{Interface: &two, Address: mustCIDR("fd00::7/64")},
			{Interface: &two, Address: mustCIDR("10.88.0.7/16")},
		},
	}, nil
}

func (f *fakeCNI) DelNetworkList(_ context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{"DEL", list, *rt})
	if f.delErr != nil {
		return f.delErr
	}
	delete(f.cache, cacheKey(list.Name, rt))
	return nil
}

func (f *fakeCNI) GetNetworkListCachedConfig(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) ([]byte, *libcni.RuntimeConf, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cache[cacheKey(list.Name, rt)], rt, nil
}

var errFakeUnused = errors.New("not used by cri-dockerd")

func (f *fakeCNI) CheckNetworkList(context.Context, *libcni.NetworkConfigList, *libcni.RuntimeConf) error {
	return errFakeUnused
}
func (f *fakeCNI) GetNetworkListCachedResult(*libcni.NetworkConfigList, *libcni.RuntimeConf) (cnitypes.Result, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) AddNetwork(context.Context, *libcni.PluginConfig, *libcni.RuntimeConf) (cnitypes.Result, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) CheckNetwork(context.Context, *libcni.PluginConfig, *libcni.RuntimeConf) error {
	return errFakeUnused
}
func (f *fakeCNI) DelNetwork(context.Context, *libcni.PluginConfig, *libcni.RuntimeConf) error {
	return errFakeUnused
}
func (f *fakeCNI) GetNetworkCachedResult(*libcni.PluginConfig, *libcni.RuntimeConf) (cnitypes.Result, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) GetNetworkCachedConfig(*libcni.PluginConfig, *libcni.RuntimeConf) ([]byte, *libcni.RuntimeConf, error) {
	return nil, nil, errFakeUnused
}
func (f *fakeCNI) ValidateNetworkList(context.Context, *libcni.NetworkConfigList) ([]string, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) ValidateNetwork(context.Context, *libcni.PluginConfig) ([]string, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) GCNetworkList(context.Context, *libcni.NetworkConfigList, *libcni.GCArgs) error {
	return errFakeUnused
}
func (f *fakeCNI) GetStatusNetworkList(context.Context, *libcni.NetworkConfigList) error {
	return errFakeUnused
}
func (f *fakeCNI) GetCachedAttachments(string) ([]*libcni.NetworkAttachment, error) {
	return nil, errFakeUnused
}
func (f *fakeCNI) GetVersionInfo(context.Context, string) (version.PluginInfo, error) {
	return nil, errFakeUnused
}

func (f *fakeCNI) recorded() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func mustCIDR(s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return *n
}

// bridgeConflist is a config like packaging/cni/10-cri-dockerd-bridge.conflist.
func bridgeConflist(name string) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}, "capabilities": {"ipRanges": true}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "bandwidth", "capabilities": {"bandwidth": true}}
]}`, name)
}

type cniEnv struct {
	confDir, binDir string
	fake            *fakeCNI
}

// newCNIEnv makes a config directory and a plugin directory holding the reference plugins'
// names (empty executables: the fake runs nothing).
func newCNIEnv(t *testing.T, plugins ...string) *cniEnv {
	t.Helper()
	e := &cniEnv{confDir: filepath.Join(t.TempDir(), "net.d"), binDir: t.TempDir(), fake: newFakeCNI()}
	if len(plugins) == 0 {
		plugins = []string{"bridge", "host-local", "portmap", "bandwidth", "loopback"}
	}
	for _, p := range plugins {
		if err := os.WriteFile(filepath.Join(e.binDir, p), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *cniEnv) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(e.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Write and rename, as config installers do, so the watch never sees half a file.
	tmp := filepath.Join(e.confDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.confDir, name)); err != nil {
		t.Fatal(err)
	}
}

func (e *cniEnv) start(t *testing.T, opts CNIOptions) *CNI {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	opts.ConfDir, opts.BinDirs, opts.CNI, opts.Logger = e.confDir, []string{filepath.Join(e.binDir, "missing"), e.binDir}, e.fake, logrus.NewEntry(logger)
	c, err := NewCNI(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually waits up to 5 s (scaled by the load) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, cond, "timed out waiting until %s", what)
}

func TestCNINotReadyUntilAConfigAppearsThenReadyWithoutRestart(t *testing.T) {
	e := newCNIEnv(t)
	// A resync far away: readiness must come from the directory watch.
	c := e.start(t, CNIOptions{Resync: time.Hour})
	err := c.Status()
	if !IsNotReady(err) || !strings.Contains(err.Error(), "no CNI network config in "+e.confDir) {
		t.Fatalf("Status with an empty config directory = %v, want not ready naming the directory", err)
	}
	if _, err := c.Plan(Pod{Name: "p"}); !IsNotReady(err) {
		t.Fatalf("Plan while not ready = %v, want a NotReadyError", err)
	}
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	eventually(t, "the new config is used", func() bool { return c.Status() == nil })
	att, err := c.Plan(Pod{Name: "p"})
	if err != nil || att.Network != "testnet" || att.ConfFile != filepath.Join(e.confDir, "10-test.conflist") || att.IfName != "eth0" {
		t.Fatalf("Plan = %+v, %v; want network testnet from 10-test.conflist on eth0", att, err)
	}
	// Removing it makes the node not ready again.
	if err := os.Remove(filepath.Join(e.confDir, "10-test.conflist")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removed config is dropped", func() bool { return IsNotReady(c.Status()) })
}

// A config written after New read the directory but before its watch took hold is seen at once,
// not at the next resync: the watch's start reads the directory again.
func TestCNIConfigWrittenBeforeTheWatchIsSeen(t *testing.T) {
	e := newCNIEnv(t)
	wrote := make(chan struct{})
	beforeFirstWatch = func() {
		e.write(t, "10-test.conflist", bridgeConflist("testnet"))
		close(wrote)
	}
	t.Cleanup(func() { beforeFirstWatch = func() {} })
	c := e.start(t, CNIOptions{Resync: time.Hour})
	<-wrote
	eventually(t, "the config written before the watch is used", func() bool { return c.Status() == nil })
}

func TestCNIConfigDirectoryIsPolledWhenItAppearsLate(t *testing.T) {
	e := newCNIEnv(t)
	// The directory cannot be made (its parent is a file): it is polled, not watched.
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.confDir = filepath.Join(parent, "net.d")
	c := e.start(t, CNIOptions{Resync: 20 * time.Millisecond})
	if !IsNotReady(c.Status()) {
		t.Fatal("ready without a config directory")
	}
	if err := os.Remove(parent); err != nil {
		t.Fatal(err)
	}
	e.write(t, "10-test.conflist", bridgeConflist("late"))
	eventually(t, "the late directory's config is used", func() bool { return c.Status() == nil })
}

func TestCNIChoosesFirstValidConfigAndSaysWhyOthersAreSkipped(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "05-broken.conflist", `{"cniVersion": "1.0.0", "name": "broken", "plugins": [`)
	c := e.start(t, CNIOptions{})
	err := c.Status()
	if !IsNotReady(err) || !strings.Contains(err.Error(), "05-broken.conflist") || !strings.Contains(err.Error(), "no valid CNI network config") {
		t.Fatalf("Status with only a broken config = %v, want not ready naming the file and its error", err)
	}
	e.write(t, "20-second.conflist", bridgeConflist("second"))
	// A single plugin config (.conf) is a list of one.
	e.write(t, "10-first.conf", `{"cniVersion": "0.4.0", "name": "first", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}}`)
	// The watch reloads on each new file; a load that read the directory before the last file
	// came may end after one that saw it (this test reloads beside the watch), so wait for the
	// load after the last event.
	c.reload()
	eventually(t, "the first valid config in lexical order (first)", func() bool {
		att, err := c.Plan(Pod{})
		return err == nil && att.Network == "first"
	})
}

func TestCNIMissingPluginBinaryIsNotReady(t *testing.T) {
	e := newCNIEnv(t, "bridge", "host-local", "bandwidth") // no portmap
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	err := c.Status()
	if !IsNotReady(err) || !strings.Contains(err.Error(), `failed to find plugin "portmap"`) {
		t.Fatalf("Status = %v, want not ready: plugin portmap missing", err)
	}
	if _, err := c.Plan(Pod{}); !IsNotReady(err) {
		t.Fatalf("Plan = %v, want not ready", err)
	}
}

func TestCNISetUpPassesCNIArgsAndCapabilitiesAndKeepsPodIPs(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	if err := c.UpdatePodCIDR("10.244.1.0/24, fd00:1::/64"); err != nil {
		t.Fatal(err)
	}
	att, err := c.Plan(Pod{
		SandboxID: "sb1", Namespace: "ns", Name: "web", UID: "u1",
		PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp", HostIP: "127.0.0.1"}, {ContainerPort: 9090, Protocol: "udp"}},
		Bandwidth:    &Bandwidth{IngressRate: 1000000, IngressBurst: 1 << 31},
		DNS:          &DNS{Servers: []string{"10.96.0.10"}, Searches: []string{"svc.cluster.local"}, Options: []string{"ndots:5"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetUp(context.Background(), att, "/proc/42/ns/net"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.88.0.7", "fd00::7"}; strings.Join(att.IPs, ",") != strings.Join(want, ",") {
		t.Errorf("pod IPs = %v, want %v (IPv4 first, not the gateway's)", att.IPs, want)
	}
	calls := e.fake.recorded()
	if len(calls) != 1 || calls[0].op != "ADD" {
		t.Fatalf("calls = %+v, want one ADD", calls)
	}
	rt := calls[0].rt
	if rt.ContainerID != "sb1" || rt.NetNS != "/proc/42/ns/net" || rt.IfName != "eth0" {
		t.Errorf("runtime conf = %+v", rt)
	}
	args := map[string]string{}
	for _, kv := range rt.Args {
		args[kv[0]] = kv[1]
	}
	if args["K8S_POD_NAMESPACE"] != "ns" || args["K8S_POD_NAME"] != "web" || args["K8S_POD_INFRA_CONTAINER_ID"] != "sb1" || args["K8S_POD_UID"] != "u1" || args["IgnoreUnknown"] != "1" {
		t.Errorf("CNI_ARGS = %v", rt.Args)
	}
	caps, _ := json.Marshal(rt.CapabilityArgs)
	want := `{"bandwidth":{"ingressRate":1000000,"ingressBurst":2147483648},` +
		`"dns":{"servers":["10.96.0.10"],"searches":["svc.cluster.local"],"options":["ndots:5"]},` +
		`"ipRanges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:1::/64"}]],` +
		`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"127.0.0.1"}]}`
	if string(caps) != want {
		t.Errorf("capability args\n got %s\nwant %s", caps, want)
	}
}

func TestCNITearDownUsesTheConfigOfTheAddAfterARestart(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("old"))
	c := e.start(t, CNIOptions{})
	att, err := c.Plan(Pod{SandboxID: "sb1", Name: "p", PortMappings: []PortMapping{{HostPort: 80, ContainerPort: 80, Protocol: "tcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetUp(context.Background(), att, "/proc/1/ns/net"); err != nil {
		t.Fatal(err)
	}
	// The attachment goes through the checkpoint (JSON) and the network config changes.
	raw, _ := json.Marshal(att)
	var restored Attachment
	if err := json.Unmarshal(raw, &restored); err != nil {
		t.Fatal(err)
	}
	e.write(t, "10-test.conflist", bridgeConflist("new"))
	c.reload()
	if err := c.TearDown(context.Background(), &restored, ""); err != nil {
		t.Fatal(err)
	}
	calls := e.fake.recorded()
	del := calls[len(calls)-1]
	if del.op != "DEL" || del.list.Name != "old" || del.rt.NetNS != "" || del.rt.ContainerID != "sb1" {
		t.Fatalf("teardown = %s of %q (netns %q), want DEL of network old with no netns", del.op, del.list.Name, del.rt.NetNS)
	}
	if pm, _ := json.Marshal(del.rt.CapabilityArgs["portMappings"]); !strings.Contains(string(pm), `"hostPort":80`) {
		t.Errorf("DEL capability args lack the port mappings: %s", pm)
	}
	// Again: libcni's cache is gone and the network is no longer configured; nothing to run.
	if err := c.TearDown(context.Background(), &restored, ""); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	if n := len(e.fake.recorded()); n != len(calls) {
		t.Errorf("a DEL ran for a network that has no config left")
	}
}

func TestCNITearDownAfterAFailedAddUsesThePlannedConfig(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{})
	e.fake.addErr = errors.New(`plugin type="portmap" failed (add): boom`)
	att, err := c.Plan(Pod{SandboxID: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.SetUp(context.Background(), att, "/proc/1/ns/net")
	if err == nil || !strings.Contains(err.Error(), `plugin type="portmap" failed (add): boom`) || !strings.Contains(err.Error(), `"testnet"`) {
		t.Fatalf("SetUp = %v, want the plugin's error with the network's name", err)
	}
	if err := c.TearDown(context.Background(), att, "/proc/1/ns/net"); err != nil {
		t.Fatal(err)
	}
	if calls := e.fake.recorded(); len(calls) != 2 || calls[1].op != "DEL" || calls[1].list.Name != "testnet" {
		t.Fatalf("calls = %+v, want ADD then DEL of testnet", calls)
	}
}

func TestCNIMTUOverridesTheInterfaceMTUOfPluginsThatTakeOne(t *testing.T) {
	e := newCNIEnv(t)
	e.write(t, "10-test.conflist", bridgeConflist("testnet"))
	c := e.start(t, CNIOptions{MTU: 1400})
	att, err := c.Plan(Pod{})
	if err != nil {
		t.Fatal(err)
	}
	list := att.plan.(*loadedNetwork).list
	for _, p := range list.Plugins {
		has := strings.Contains(string(p.Bytes), `"mtu":1400`)
		if has != (p.Network.Type == "bridge") {
			t.Errorf("plugin %s config %s: mtu set = %v", p.Network.Type, p.Bytes, has)
		}
	}
}

func TestCNIUpdatePodCIDRRejectsGarbage(t *testing.T) {
	e := newCNIEnv(t)
	c := e.start(t, CNIOptions{})
	if err := c.UpdatePodCIDR("10.0.0.0/33"); err == nil {
		t.Fatal("accepted an invalid CIDR")
	}
}

func TestBandwidthFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        *Bandwidth
		err         string
	}{
		{annotations: nil},
		{annotations: map[string]string{"other": "1M"}},
		{annotations: map[string]string{IngressBandwidthAnnotation: "10M"}, want: &Bandwidth{IngressRate: 10_000_000, IngressBurst: 1<<31 - 1}},
		{annotations: map[string]string{EgressBandwidthAnnotation: "1Mi", IngressBandwidthAnnotation: "2k"}, want: &Bandwidth{IngressRate: 2000, IngressBurst: 1<<31 - 1, EgressRate: 1 << 20, EgressBurst: 1<<31 - 1}},
		{annotations: map[string]string{IngressBandwidthAnnotation: "fast"}, err: "kubernetes.io/ingress-bandwidth"},
		{annotations: map[string]string{EgressBandwidthAnnotation: "10"}, err: "within 1k and 1P"},
		{annotations: map[string]string{EgressBandwidthAnnotation: "2P"}, err: "within 1k and 1P"},
		{annotations: map[string]string{EgressBandwidthAnnotation: "1e100"}, err: "within 1k and 1P"},
		// resource.ParseQuantity would take most of a minute over this one.
		{annotations: map[string]string{IngressBandwidthAnnotation: "1e-99999999"}, err: "exponent"},
	} {
		got, err := BandwidthFromAnnotations(tc.annotations)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err = %v, want one mentioning %q", tc.annotations, err, tc.err)
			}
			continue
		}
		if err != nil || (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%v: got %+v, %v; want %+v", tc.annotations, got, err, tc.want)
		}
	}
}

func TestDockerBridgeDoesNothing(t *testing.T) {
	b := NewDockerBridge("")
	if b.Namespaced() || b.Status() != nil {
		t.Fatal("the Docker bridge plugin must leave networking to Docker and be ready")
	}
	if att, err := b.Plan(Pod{Name: "p"}); att != nil || err != nil {
		t.Fatalf("Plan = %v, %v", att, err)
	}
}
