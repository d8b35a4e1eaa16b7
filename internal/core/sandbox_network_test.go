package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	dockernetwork "github.com/docker/docker/api/types/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// fakeNet is a namespaced network plugin (like CNI) that records what core asks of it.
type fakeNet struct {
	mu          sync.Mutex
	notReady    string
	setUpErr    error
	tearDownErr error
	podCIDR     string
	setUps      []fakeNetCall
	tearDowns   []fakeNetCall
	next        int
}

type fakeNetCall struct {
	sandboxID, netns string
	att              network.Attachment
}

func (f *fakeNet) Name() string     { return "cni" }
func (f *fakeNet) Namespaced() bool { return true }
func (f *fakeNet) Close() error     { return nil }

func (f *fakeNet) Status() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notReady != "" {
		return &network.NotReadyError{Plugin: "cni", Reason: f.notReady}
	}
	return nil
}

func (f *fakeNet) Plan(pod network.Pod) (*network.Attachment, error) {
	if err := f.Status(); err != nil {
		return nil, err
	}
	return &network.Attachment{Plugin: "cni", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Network: "testnet", IfName: "eth0",
		PortMappings: pod.PortMappings, Bandwidth: pod.Bandwidth, DNS: pod.DNS}, nil
}

func (f *fakeNet) SetUp(_ context.Context, att *network.Attachment, netns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setUps = append(f.setUps, fakeNetCall{att.SandboxID, netns, *att})
	if f.setUpErr != nil {
		return f.setUpErr
	}
	f.next++
	att.IPs = []string{"10.88.0." + strconv.Itoa(f.next), "fd00::" + strconv.Itoa(f.next)}
	return nil
}

func (f *fakeNet) TearDown(_ context.Context, att *network.Attachment, netns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tearDowns = append(f.tearDowns, fakeNetCall{att.SandboxID, netns, *att})
	return f.tearDownErr
}

func (f *fakeNet) UpdatePodCIDR(cidr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podCIDR = cidr
	return nil
}

func (f *fakeNet) calls() (setUps, tearDowns []fakeNetCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeNetCall(nil), f.setUps...), append([]fakeNetCall(nil), f.tearDowns...)
}

// fakePins pins nothing for real (the fake's PIDs may be real processes of this machine).
type fakePins struct {
	mu     sync.Mutex
	pinned map[string]bool
}

func (p *fakePins) Pin(id string, pid int) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pinned == nil {
		p.pinned = map[string]bool{}
	}
	p.pinned[id] = true
	return "/pins/" + id, nil
}

func (p *fakePins) Path(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pinned[id] {
		return "/pins/" + id
	}
	return ""
}

func (p *fakePins) Unpin(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pinned, id)
	return nil
}

func (p *fakePins) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pinned)
}

func newNetService(t *testing.T, fake *libdocker.Fake, net network.Plugin, root string) *Service {
	t.Helper()
	s := newTestService(t, fake, Options{NetworkPlugin: "cni", Network: net, RootDirectory: root})
	s.pins = &fakePins{}
	return s
}

func checkpointFiles(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func sandboxStatus(t *testing.T, s *Service, id string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	resp, err := s.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

func TestRunPodSandboxWithCNIAttachesAnEmptyNamespaceAndCheckpointsIPs(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	cfg := sandboxConfig("web")
	cfg.Hostname = "web-host"
	cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}}
	cfg.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080, Protocol: runtimeapi.Protocol_TCP}, {ContainerPort: 53, Protocol: runtimeapi.Protocol_UDP}}
	cfg.Annotations[network.IngressBandwidthAnnotation] = "1M"
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.PodSandboxId

	c, _ := fake.InspectContainer(context.Background(), id)
	if c.HostConfig.NetworkMode != "none" || len(c.HostConfig.PortBindings) != 0 || len(c.Config.ExposedPorts) != 0 {
		t.Errorf("sandbox NetworkMode %q, port bindings %v, exposed %v; want none and no Docker ports", c.HostConfig.NetworkMode, c.HostConfig.PortBindings, c.Config.ExposedPorts)
	}
	if c.Config.Hostname != "web-host" || strings.Join(c.HostConfig.DNS, ",") != "10.96.0.10" || strings.Join(c.HostConfig.DNSSearch, ",") != "ns.svc.cluster.local" || strings.Join(c.HostConfig.DNSOptions, ",") != "ndots:5" {
		t.Errorf("hostname %q, DNS %v %v %v: want the pod's", c.Config.Hostname, c.HostConfig.DNS, c.HostConfig.DNSSearch, c.HostConfig.DNSOptions)
	}
	setUps, _ := net.calls()
	if len(setUps) != 1 {
		t.Fatalf("%d set ups, want 1", len(setUps))
	}
	up := setUps[0]
	if want := "/proc/" + strconv.Itoa(c.State.Pid) + "/ns/net"; up.sandboxID != id || up.netns != want {
		t.Errorf("SetUp(%s, %q), want (%s, %q)", up.sandboxID, up.netns, id, want)
	}
	if len(up.att.PortMappings) != 2 || up.att.PortMappings[0].HostPort != 8080 || up.att.PortMappings[1].Protocol != "udp" ||
		up.att.Bandwidth == nil || up.att.Bandwidth.IngressRate != 1_000_000 || up.att.DNS == nil || up.att.DNS.Servers[0] != "10.96.0.10" {
		t.Errorf("attachment handed to the plugin: %+v", up.att)
	}

	st := sandboxStatus(t, s, id)
	if st.Network.Ip != "10.88.0.1" || len(st.Network.AdditionalIps) != 1 || st.Network.AdditionalIps[0].Ip != "fd00::1" {
		t.Errorf("PodSandboxStatus network = %v, want 10.88.0.1 + fd00::1", st.Network)
	}
	if st.Linux.Namespaces.Options.Network != runtimeapi.NamespaceMode_POD {
		t.Errorf("network namespace mode = %v", st.Linux.Namespaces.Options.Network)
	}
	if files := checkpointFiles(t, root); len(files) != 1 || files[0] != id+".json" {
		t.Errorf("checkpoint files = %v, want %s.json alone", files, id)
	}

	// A restarted cri-dockerd answers the same, from the checkpoint.
	s2 := newNetService(t, fake, net, root)
	if st2 := sandboxStatus(t, s2, id); st2.Network.Ip != st.Network.Ip || len(st2.Network.AdditionalIps) != 1 {
		t.Errorf("after a restart PodSandboxStatus network = %v, want %v", st2.Network, st.Network)
	}
}

func TestRunPodSandboxNetworkNotReadyCreatesNothing(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{notReady: "no CNI network config in /etc/cni/net.d"}, t.TempDir()
	s := newNetService(t, fake, net, root)
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no CNI network config in /etc/cni/net.d") {
		t.Fatalf("RunPodSandbox = %v, want FailedPrecondition with the plugin's reason", err)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left behind: %v", files)
	}
}

func TestRunPodSandboxSetUpFailureUndoesEverything(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &fakeNet{setUpErr: errors.New(`CNI network "testnet": plugin type="tuning" failed (add): no such file`)}
	s := newNetService(t, fake, net, root)
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")})
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), `plugin type="tuning" failed (add): no such file`) {
		t.Fatalf("RunPodSandbox = %v, want the plugin's error", err)
	}
	setUps, tearDowns := net.calls()
	if len(tearDowns) != 1 || tearDowns[0].sandboxID != setUps[0].sandboxID || tearDowns[0].netns != setUps[0].netns {
		t.Errorf("tear downs %+v after set up %+v: want one DEL of the same sandbox and namespace", tearDowns, setUps)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left behind: %v", files)
	}
}

func TestSetUpFailureWhoseUndoFailsIsRetriedAtTheNextStart(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &fakeNet{setUpErr: errors.New("add failed"), tearDownErr: errors.New("del failed")}
	s := newNetService(t, fake, net, root)
	if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")}); err == nil {
		t.Fatal("RunPodSandbox succeeded")
	}
	if files := checkpointFiles(t, root); len(files) != 1 {
		t.Fatalf("checkpoints = %v, want the one whose DEL failed", files)
	}
	if n := s.pins.(*fakePins).count(); n != 1 {
		t.Errorf("%d namespaces pinned, want the one whose DEL failed", n)
	}
	net.tearDownErr = nil
	newNetService(t, fake, net, root)
	if _, tearDowns := net.calls(); len(tearDowns) != 2 || tearDowns[1].netns != "" {
		t.Errorf("tear downs = %+v, want a second one at start (this fake pins in memory: no namespace left)", tearDowns)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints after the retry: %v", files)
	}
}

func TestStopPodSandboxTearsDownOnceAlsoWhenTheSandboxIsGone(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	ctx := context.Background()
	id, _ := runPod(t, s, "a", "")
	c, _ := fake.InspectContainer(ctx, id)
	for i := 0; i < 2; i++ {
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
	}
	_, tearDowns := net.calls()
	if len(tearDowns) != 1 || tearDowns[0].sandboxID != id || tearDowns[0].netns != "/proc/"+strconv.Itoa(c.State.Pid)+"/ns/net" {
		t.Fatalf("tear downs = %+v, want one, in the running sandbox's namespace", tearDowns)
	}
	if st := sandboxStatus(t, s, id); st.Network.Ip != "" || st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("stopped sandbox: state %v, IP %q", st.State, st.Network.Ip)
	}

	// docker rm -f of the sandbox, then the kubelet stops it (by a prefix, as crictl would).
	id2, _ := runPod(t, s, "b", "")
	if err := fake.RemoveContainer(ctx, id2, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id2[:12]}); err != nil {
			t.Fatalf("stop of a removed sandbox %d: %v", i+1, err)
		}
	}
	if _, tearDowns = net.calls(); len(tearDowns) != 2 || tearDowns[1].sandboxID != id2 || tearDowns[1].netns != "/pins/"+id2 {
		t.Fatalf("tear downs = %+v, want a second one for %s in its pinned namespace", tearDowns, id2)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
	if n := s.pins.(*fakePins).count(); n != 0 {
		t.Errorf("%d namespaces still pinned", n)
	}
}

func TestRemovePodSandboxWithoutStopTearsDown(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	id, _ := runPod(t, s, "a", "")
	if _, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 {
		t.Errorf("%d tear downs, want 1", len(tearDowns))
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
}

func TestTearDownFailureFailsStopAndKeepsTheCheckpoint(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	id, _ := runPod(t, s, "a", "")
	net.tearDownErr = errors.New(`plugin type="portmap" failed (delete): iptables busy`)
	_, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	if err == nil || !strings.Contains(err.Error(), "iptables busy") {
		t.Fatalf("StopPodSandbox = %v, want the plugin's error", err)
	}
	if c, _ := fake.InspectContainer(context.Background(), id); !c.State.Running {
		t.Error("the sandbox was stopped although its network is still attached")
	}
	if len(checkpointFiles(t, root)) != 1 {
		t.Error("the checkpoint is gone although the DEL failed")
	}
	net.tearDownErr = nil
	if _, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("retried stop: %v", err)
	}
}

// A plugin that keeps no record of its own (this fake) cannot rebuild a damaged checkpoint: the
// stop says so and stops nothing, rather than leak the pod's IP silently.
func TestUnreadableCheckpointWithNothingToRebuildItFromFailsStop(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	id, _ := runPod(t, s, "a", "")
	if err := os.WriteFile(filepath.Join(root, "sandboxes", id+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := sandboxStatus(t, s, id); st.Network.Ip != "" {
		t.Errorf("IP %q from a corrupt checkpoint", st.Network.Ip)
	}
	_, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "ns/a") || !strings.Contains(err.Error(), "keeps no record") {
		t.Fatalf("StopPodSandbox = %v, want DataLoss naming the pod and what is missing", err)
	}
	if !running(t, fake, id) || len(checkpointFiles(t, root)) != 1 {
		t.Error("the failed stop stopped the sandbox or dropped its checkpoint")
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 0 {
		t.Errorf("tear downs %+v from nothing", tearDowns)
	}
}

func TestHostNetworkPodIsNotAttachedByThePlugin(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{notReady: "no config"}, t.TempDir()
	s := newNetService(t, fake, net, root)
	cfg := sandboxConfig("h")
	cfg.Hostname = "ignored"
	cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}} // ClusterFirstWithHostNet
	cfg.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 80}}
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}}
	// Host-network pods run while the CNI config is missing: that is how CNI daemonsets start.
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(context.Background(), resp.PodSandboxId)
	if c.HostConfig.NetworkMode != "host" || c.Config.Hostname != "" || len(c.HostConfig.PortBindings) != 0 || strings.Join(c.HostConfig.DNS, ",") != "10.96.0.10" {
		t.Errorf("NetworkMode %q hostname %q bindings %v DNS %v", c.HostConfig.NetworkMode, c.Config.Hostname, c.HostConfig.PortBindings, c.HostConfig.DNS)
	}
	if setUps, _ := net.calls(); len(setUps) != 0 || len(checkpointFiles(t, root)) != 0 {
		t.Errorf("a host-network pod was handed to the plugin")
	}
	if _, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
}

func TestDockerBridgeModeKeepsDockerPortBindings(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{NetworkPlugin: "", RootDirectory: t.TempDir()})
	cfg := sandboxConfig("b")
	cfg.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080}}
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(context.Background(), resp.PodSandboxId)
	if c.HostConfig.NetworkMode != "default" || c.HostConfig.PortBindings["80/tcp"][0].HostPort != "8080" {
		t.Errorf("NetworkMode %q, bindings %v; want Docker's bridge publishing 8080", c.HostConfig.NetworkMode, c.HostConfig.PortBindings)
	}
}

func TestBadBandwidthAnnotationIsInvalidArgument(t *testing.T) {
	fake := libdocker.NewFake()
	s := newNetService(t, fake, &fakeNet{}, t.TempDir())
	cfg := sandboxConfig("p")
	cfg.Annotations[network.EgressBandwidthAnnotation] = "lots"
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	wantCode(t, err, codes.InvalidArgument)
	if len(fake.Containers()) != 0 {
		t.Error("containers left behind")
	}
}

func TestNetworkReadyFollowsThePlugin(t *testing.T) {
	net := &fakeNet{notReady: "no CNI network config in /etc/cni/net.d"}
	s := newNetService(t, libdocker.NewFake(), net, t.TempDir())
	networkReady := func() *runtimeapi.RuntimeCondition {
		resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.Status.Conditions {
			if c.Type == runtimeapi.NetworkReady {
				return c
			}
		}
		t.Fatal("no NetworkReady condition")
		return nil
	}
	if c := networkReady(); c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, "no CNI network config in /etc/cni/net.d") {
		t.Errorf("NetworkReady = %+v, want false with the plugin's reason", c)
	}
	net.mu.Lock()
	net.notReady = ""
	net.mu.Unlock()
	if c := networkReady(); !c.Status {
		t.Errorf("NetworkReady = %+v, want true", c)
	}
}

func TestPodCIDRReachesThePluginAndSurvivesARestart(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	req := &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.3.0/24"}}}
	if _, err := s.UpdateRuntimeConfig(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	net2 := &fakeNet{}
	newNetService(t, fake, net2, root)
	if net.podCIDR != "10.244.3.0/24" || net2.podCIDR != "10.244.3.0/24" {
		t.Errorf("pod CIDR %q, after a restart %q", net.podCIDR, net2.podCIDR)
	}
}

func TestNamespacedPluginNeedsARootDirectory(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddImage(libdocker.FakeImage("", "", testPauseImage))
	if _, err := New(context.Background(), fake, Options{Network: &fakeNet{}}); err == nil {
		t.Fatal("New accepted CNI without a root directory for its checkpoints")
	}
}

func TestCheckpointWritesAreAtomicAndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	store, err := newCheckpointStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp := &sandboxCheckpoint{SandboxID: "abc", State: checkpointReady, Network: &network.Attachment{Plugin: "cni", Network: "n", IPs: []string{"10.0.0.1"}}}
	for i := 0; i < 3; i++ {
		if err := store.put(cp); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.get("abc")
	if err != nil || got.Version != 1 || got.Network.IPs[0] != "10.0.0.1" || got.State != checkpointReady {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d files, want the checkpoint alone (no temporaries)", len(entries))
	}
	if id, _ := store.resolve("ab"); id != "abc" {
		t.Errorf("resolve(ab) = %q", id)
	}
	if got, err := store.get("../x"); got != nil || err != nil {
		t.Errorf("get(../x) = %v, %v", got, err)
	}
	if err := store.remove("abc"); err != nil {
		t.Fatal(err)
	}
	if got, err := store.get("abc"); got != nil || err != nil {
		t.Errorf("after remove: %v, %v", got, err)
	}
}

// --pod-cidr is the plugin's pod CIDR until the kubelet sends one; the kubelet's (also one it
// sent before a restart) wins.
func TestPodCIDRFlagUntilTheKubeletSendsOne(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &fakeNet{}
	s := newTestService(t, fake, Options{NetworkPlugin: "cni", Network: net, RootDirectory: root, PodCIDR: "10.233.64.0/18"})
	s.pins = &fakePins{}
	if net.podCIDR != "10.233.64.0/18" {
		t.Fatalf("pod CIDR at start %q, want --pod-cidr's", net.podCIDR)
	}
	req := &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.233.65.0/24"}}}
	if _, err := s.UpdateRuntimeConfig(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if net.podCIDR != "10.233.65.0/24" {
		t.Errorf("pod CIDR after UpdateRuntimeConfig %q, want the kubelet's", net.podCIDR)
	}
	net2 := &fakeNet{}
	newTestService(t, fake, Options{NetworkPlugin: "cni", Network: net2, RootDirectory: root, PodCIDR: "10.233.64.0/18"})
	if net2.podCIDR != "10.233.65.0/24" {
		t.Errorf("pod CIDR after a restart %q, want the kubelet's saved one over --pod-cidr", net2.podCIDR)
	}
}

// --hairpin-mode with Docker's bridge sets hairpin on each pod's port; a failure is a warning,
// host-network pods are left alone.
func TestHairpinOnDockersBridge(t *testing.T) {
	fake := libdocker.NewFake()
	var pids []int
	fail := false
	s := newTestService(t, fake, Options{HairpinVeth: true, hairpin: func(pid int) error {
		pids = append(pids, pid)
		if fail {
			return errors.New("no eth0")
		}
		return nil
	}})
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("hairpin")})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(context.Background(), resp.PodSandboxId)
	if len(pids) != 1 || pids[0] != c.State.Pid {
		t.Errorf("hairpin set for pids %v, want the sandbox's %d", pids, c.State.Pid)
	}
	host := sandboxConfig("hostnet")
	host.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}}
	if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: host}); err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 {
		t.Errorf("hairpin set for a host-network pod: %v", pids)
	}
	fail = true
	if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("nohairpin")}); err != nil {
		t.Errorf("a hairpin failure failed the pod: %v", err)
	}
}

// A sandbox Docker is restarting has no process, so no namespace of its own: its stop tears the
// network down in the pinned namespace, never in /proc/0's.
func TestStopOfARestartingSandboxUsesThePinnedNamespace(t *testing.T) {
	fake, net := libdocker.NewFake(), &fakeNet{}
	s := newNetService(t, fake, net, t.TempDir())
	t.Cleanup(s.Close)
	id, _ := runPod(t, s, "restarting", "")
	if err := fake.RestartingContainer(id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 || tearDowns[0].netns != "/pins/"+id {
		t.Errorf("tear downs %+v, want one in the pinned namespace /pins/%s", tearDowns, id)
	}
}

// At a start, the checkpoint of a removed sandbox made by another network plugin is left to
// that plugin: this one tears nothing down and keeps the checkpoint.
func TestStartLeavesTheCheckpointsOfAnotherPlugin(t *testing.T) {
	fake, net, root := libdocker.NewFake(), &fakeNet{}, t.TempDir()
	s := newNetService(t, fake, net, root)
	gone := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := s.checkpoints.put(&sandboxCheckpoint{SandboxID: gone, State: checkpointReady, Network: &network.Attachment{Plugin: "kubenet", SandboxID: gone}}); err != nil {
		t.Fatal(err)
	}
	newNetService(t, fake, net, root)
	if _, tearDowns := net.calls(); len(tearDowns) != 0 {
		t.Errorf("tear downs %+v of another plugin's sandbox", tearDowns)
	}
	if files := checkpointFiles(t, root); len(files) != 1 {
		t.Errorf("checkpoints %v, want the other plugin's kept", files)
	}
}

// A pod on Docker's own networks reports the addresses Docker gave it, IPv4 first; a sandbox
// Docker reports no network settings for has none.
func TestPodIPsFromDockersNetworkSettings(t *testing.T) {
	c := &container.InspectResponse{NetworkSettings: &container.NetworkSettings{Networks: map[string]*dockernetwork.EndpointSettings{
		"bridge": {IPAddress: "172.17.0.2", GlobalIPv6Address: "fd00::2"},
	}}}
	ip, extra := podIPs(c)
	if ip != "172.17.0.2" || len(extra) != 1 || extra[0].Ip != "fd00::2" {
		t.Errorf("podIPs = %q %v, want 172.17.0.2 then fd00::2", ip, extra)
	}
	if ip, extra := podIPs(&container.InspectResponse{}); ip != "" || extra != nil {
		t.Errorf("podIPs without network settings = %q %v", ip, extra)
	}
}
