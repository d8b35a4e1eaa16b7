package core

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// What upstream cri-dockerd writes to <root>/sandbox/<id> (store.CheckpointManager, JSON of
// core.PodSandboxCheckpoint with config.PortMapping pointers).
const upstreamCheckpointSample = `{"version":"v1","name":"web","namespace":"default","data":{"port_mappings":[` +
	`{"protocol":"tcp","container_port":80,"host_port":8080},` +
	`{"protocol":"udp","container_port":53,"host_port":5353,"host_ip":"127.0.0.1"},` +
	`{"protocol":"tcp","container_port":9090}]},"checksum":2952106398}`

func TestParseUpstreamCheckpoint(t *testing.T) {
	cp, err := parseUpstreamCheckpoint([]byte(upstreamCheckpointSample))
	if err != nil {
		t.Fatal(err)
	}
	if cp.Name != "web" || cp.Namespace != "default" || cp.Data.HostNetwork {
		t.Errorf("checkpoint %+v", cp)
	}
	want := []network.PortMapping{
		{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
	}
	if got := cp.portMappings(); !slices.Equal(got, want) {
		t.Errorf("port mappings %+v, want %+v (the one without a host port dropped)", got, want)
	}
	// A host port of 0 (upstream writes it for a port the pod does not publish) is none.
	zero, port := int32(0), int32(8443)
	cp.Data.PortMappings = append(cp.Data.PortMappings, upstreamPortMapping{ContainerPort: &port, HostPort: &zero})
	if got := cp.portMappings(); !slices.Equal(got, want) {
		t.Errorf("port mappings with a host port 0: %+v, want %+v", got, want)
	}

	// A host-network pod: upstream writes no port mappings, host_network true.
	cp, err = parseUpstreamCheckpoint([]byte(`{"version":"v1","name":"h","namespace":"n","data":{"host_network":true},"checksum":1}`))
	if err != nil || !cp.Data.HostNetwork || len(cp.portMappings()) != 0 {
		t.Errorf("host network checkpoint: %+v, %v", cp, err)
	}
	// No data at all.
	if cp, err = parseUpstreamCheckpoint([]byte(`{"version":"v1","name":"h","namespace":"n","checksum":0}`)); err != nil || len(cp.portMappings()) != 0 {
		t.Errorf("checkpoint without data: %+v, %v", cp, err)
	}
	for _, bad := range []string{`{"version":"v2","name":"x"}`, `not json`, `{"version":1}`} {
		if _, err := parseUpstreamCheckpoint([]byte(bad)); err == nil {
			t.Errorf("%s: parsed without error", bad)
		}
	}
}

func TestShouldAdopt(t *testing.T) {
	upstreamLabels := map[string]string{containerTypeLabel: containerTypeSandbox, "io.kubernetes.container.name": "POD", "app": "web"}
	ourLabels := map[string]string{containerTypeLabel: containerTypeSandbox, criKeysLabel: `["app"]`, "app": "web"}
	running := &container.State{Running: true, Pid: 42}
	stopped := &container.State{Running: false}
	sandbox := func(labels map[string]string, mode string, st *container.State) *container.InspectResponse {
		return &container.InspectResponse{
			ContainerJSONBase: &container.ContainerJSONBase{ID: "abc", State: st, HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(mode)}},
			Config:            &container.Config{Labels: labels},
		}
	}
	for _, tc := range []struct {
		name           string
		c              *container.InspectResponse
		requireRunning bool
		want           bool
	}{
		{"upstream CNI sandbox, running", sandbox(upstreamLabels, "none", running), true, true},
		{"upstream CNI sandbox, stopped, for a tear down", sandbox(upstreamLabels, "none", stopped), false, true},
		{"upstream CNI sandbox, stopped, for a status", sandbox(upstreamLabels, "none", stopped), true, false},
		{"one of ours", sandbox(ourLabels, "none", running), true, false},
		{"host network", sandbox(upstreamLabels, "host", running), true, false},
		{"Docker's bridge", sandbox(upstreamLabels, "default", running), true, false},
		{"a container, not a sandbox", sandbox(map[string]string{containerTypeLabel: containerTypeContainer}, "none", running), true, false},
		{"nil", nil, false, false},
	} {
		if got := shouldAdopt(tc.c, tc.requireRunning); got != tc.want {
			t.Errorf("%s: shouldAdopt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// adoptNet is fakeNet that can adopt, as the CNI plugin does, from a fake cache.
type adoptNet struct {
	fakeNet
	mu       sync.Mutex
	cached   map[string]bool // sandbox IDs the "cache" knows
	adopts   []network.Pod
	released []string
}

func (a *adoptNet) Adopt(pod network.Pod, ips []string) (*network.Attachment, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.adopts = append(a.adopts, pod)
	if !a.cached[pod.SandboxID] {
		if len(ips) == 0 {
			return nil, []string{"nothing cached"}
		}
		return &network.Attachment{Plugin: "cni", SandboxID: pod.SandboxID, Network: "testnet", IfName: "eth0", IPs: ips, PortMappings: pod.PortMappings}, []string{"nothing cached"}
	}
	if len(ips) == 0 {
		ips = []string{"10.77.0.9"} // the cached result
	}
	return &network.Attachment{Plugin: "cni", SandboxID: pod.SandboxID, Namespace: pod.Namespace, Name: pod.Name,
		Network: "cachednet", IfName: "eth0", IPs: ips, PortMappings: pod.PortMappings}, nil
}

// TearDown drops the cache entry, as libcni does after a DEL.
func (a *adoptNet) TearDown(ctx context.Context, att *network.Attachment, netns string) error {
	err := a.fakeNet.TearDown(ctx, att, netns)
	if err == nil {
		a.mu.Lock()
		delete(a.cached, att.SandboxID)
		a.mu.Unlock()
	}
	return err
}

func (a *adoptNet) ReleaseLeftovers(_ context.Context, id, _ string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = append(a.released, id)
	return nil
}

func (a *adoptNet) adoptCalls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.adopts)
}

// upstreamSandbox creates, in the fake, a sandbox as upstream cri-dockerd leaves it: its name
// and labels, NetworkMode none, running.
func upstreamSandbox(t *testing.T, fake *libdocker.Fake, name string, start bool) string {
	t.Helper()
	ctx := context.Background()
	id, err := fake.CreateContainer(ctx, "k8s_POD_"+name+"_default_uid-"+name+"_0", &container.Config{Image: testPauseImage, Labels: map[string]string{
		containerTypeLabel: containerTypeSandbox, "io.kubernetes.container.name": "POD", "io.kubernetes.pod.name": name,
	}}, &container.HostConfig{NetworkMode: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if start {
		if err := fake.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func writeUpstreamCheckpoint(t *testing.T, root, id, content string) string {
	t.Helper()
	path := filepath.Join(root, upstreamCheckpointDir, id)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newAdoptService(t *testing.T, fake *libdocker.Fake, net network.Plugin, root string, ips ...string) (*Service, *fakePins) {
	t.Helper()
	s := newNetService(t, fake, net, root)
	pins := &fakePins{}
	s.pins = pins
	s.adoptions.readIPs = func(string) ([]string, error) { return ips, nil }
	return s, pins
}

func TestUpstreamSandboxIsAdoptedAtStartKeepsItsIPAndIsTornDownFully(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{cached: map[string]bool{}}
	s, pins := newAdoptService(t, fake, net, root, "10.77.0.5", "fd00::5")
	ctx := context.Background()
	logged := warnings(s)
	id := upstreamSandbox(t, fake, "web", true)
	net.cached[id] = true
	upstreamFile := writeUpstreamCheckpoint(t, root, id, upstreamCheckpointSample)

	s.adoptUpstreamSandboxes(ctx) // what New runs at start, after the index is rebuilt
	for _, w := range logged() {  // it all worked: the IPs read, the namespace pinned
		t.Error(w)
	}
	cp, err := s.checkpoints.get(id)
	if err != nil || cp == nil {
		t.Fatalf("no checkpoint of ours after the start: %v, %v", cp, err)
	}
	if cp.State != checkpointReady || cp.Network.Network != "cachednet" || !slices.Equal(cp.Network.IPs, []string{"10.77.0.5", "fd00::5"}) || len(cp.Network.PortMappings) != 2 {
		t.Errorf("checkpoint %+v, network %+v", cp, cp.Network)
	}
	if p := net.adopts[0]; p.Namespace != "default" || p.Name != "web" || p.UID != "uid-web" {
		t.Errorf("pod handed to the plugin: %+v", p)
	}
	if pins.count() != 1 {
		t.Errorf("%d pins, want the adopted namespace pinned", pins.count())
	}
	st := sandboxStatus(t, s, id)
	if st.Network.Ip != "10.77.0.5" || len(st.Network.AdditionalIps) != 1 || st.Network.AdditionalIps[0].Ip != "fd00::5" {
		t.Errorf("status network %v", st.Network)
	}
	if n := net.adoptCalls(); n != 1 {
		t.Errorf("%d adoptions, want 1 (a status of an adopted sandbox reads our checkpoint)", n)
	}

	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	_, tearDowns := net.calls()
	if len(tearDowns) != 1 || tearDowns[0].att.Network != "cachednet" || len(tearDowns[0].att.PortMappings) != 2 || tearDowns[0].netns == "" {
		t.Fatalf("tear downs %+v", tearDowns)
	}
	if pins.count() != 0 || len(checkpointFiles(t, root)) != 0 {
		t.Errorf("after the stop: %d pins, checkpoints %v", pins.count(), checkpointFiles(t, root))
	}
	if len(net.released) != 1 {
		t.Errorf("upstream's leftovers released %d times, want 1", len(net.released))
	}
	if _, err := os.Stat(upstreamFile); err != nil {
		t.Errorf("upstream's checkpoint is gone after a stop (upstream keeps it until the removal): %v", err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 {
		t.Errorf("%d tear downs after the removal, want still 1", len(tearDowns))
	}
	if _, err := os.Stat(upstreamFile); !os.IsNotExist(err) {
		t.Errorf("upstream's checkpoint after RemovePodSandbox: %v", err)
	}
	for _, w := range logged() { // the removal of upstream's checkpoint worked too
		if strings.Contains(w, "checkpoint") {
			t.Error(w)
		}
	}
}

// An adoption that failed is not tried again by every PodSandboxStatus (the kubelet asks every
// second), and is warned of once.
func TestFailedAdoptionIsNotRetriedAtOnce(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{}
	s, _ := newAdoptService(t, fake, net, root) // no IPs in the namespace, nothing cached
	logged := warnings(s)
	id := upstreamSandbox(t, fake, "lost", true)
	for range 3 {
		sandboxStatus(t, s, id)
	}
	net.mu.Lock()
	tries := len(net.adopts)
	net.mu.Unlock()
	if tries != 1 {
		t.Errorf("%d adoptions tried by 3 statuses, want 1", tries)
	}
	if got := logged(); len(got) != 1 {
		t.Errorf("warnings %q, want one of the failed adoption", got)
	}
}

func TestUpstreamSandboxIsAdoptedLazilyByPodSandboxStatus(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{}
	s, _ := newAdoptService(t, fake, net, root, "10.77.0.6")
	// Started after cri-dockerd, without upstream's checkpoint and nothing in the cache: the
	// IP is still reported, and the DEL is left to the current config.
	id := upstreamSandbox(t, fake, "late", true)
	if st := sandboxStatus(t, s, id); st.Network.Ip != "10.77.0.6" {
		t.Errorf("status IP %q, want the one read from the namespace", st.Network.Ip)
	}
	if cp, _ := s.checkpoints.get(id); cp == nil || cp.Network.Network != "testnet" {
		t.Errorf("checkpoint %+v", cp)
	}
}

func TestSandboxWithOurCheckpointOrOursIsNeverAdopted(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{}
	s, _ := newAdoptService(t, fake, net, root, "10.77.0.7")
	ctx := context.Background()

	// An upstream sandbox that already has a checkpoint of ours (adopted before).
	id := upstreamSandbox(t, fake, "known", true)
	if err := s.checkpoints.put(&sandboxCheckpoint{SandboxID: id, State: checkpointReady, Network: &network.Attachment{Plugin: "cni", SandboxID: id, IPs: []string{"10.1.1.1"}}}); err != nil {
		t.Fatal(err)
	}
	// One of ours whose network is gone.
	ours := runCNIPodForAdoptTest(t, s)
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ours}); err != nil {
		t.Fatal(err)
	}
	if err := fake.StartContainer(ctx, ours); err != nil {
		t.Fatal(err)
	}
	s.adoptUpstreamSandboxes(ctx)
	if st := sandboxStatus(t, s, id); st.Network.Ip != "10.1.1.1" {
		t.Errorf("status IP %q, want our checkpoint's", st.Network.Ip)
	}
	if st := sandboxStatus(t, s, ours); st.Network.Ip != "" {
		t.Errorf("our own sandbox without a checkpoint got IP %q", st.Network.Ip)
	}
	if n := net.adoptCalls(); n != 0 {
		t.Errorf("%d adoptions, want none", n)
	}
}

func runCNIPodForAdoptTest(t *testing.T, s *Service) string {
	t.Helper()
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "ours", Namespace: "default", Uid: "uid-ours"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PodSandboxId
}

func TestStoppedOrGoneUpstreamSandboxIsTornDownFromTheCache(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{cached: map[string]bool{}}
	s, _ := newAdoptService(t, fake, net, root)
	ctx := context.Background()
	logged := warnings(s)

	// Stopped behind our back (never started here): the stop adopts it from the cache.
	stopped := upstreamSandbox(t, fake, "stopped", false)
	net.cached[stopped] = true
	writeUpstreamCheckpoint(t, root, stopped, upstreamCheckpointSample)
	if st := sandboxStatus(t, s, stopped); st.Network.Ip != "" || net.adoptCalls() != 0 {
		t.Errorf("a stopped upstream sandbox: IP %q, %d adoptions; want none", st.Network.Ip, net.adoptCalls())
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: stopped}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 || tearDowns[0].sandboxID != stopped || tearDowns[0].netns != "" {
		t.Errorf("tear downs %+v", tearDowns)
	}

	// Gone from Docker, its upstream checkpoint and cache entry left: torn down at the start.
	gone := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	net.cached[gone] = true
	upstreamFile := writeUpstreamCheckpoint(t, root, gone, upstreamCheckpointSample)
	s.adoptUpstreamSandboxes(ctx)
	s.cleanUpOrphanNetworks(ctx)
	s.removeGoneUpstreamCheckpoints(ctx)
	if _, tearDowns := net.calls(); len(tearDowns) != 2 || tearDowns[1].sandboxID != gone || len(tearDowns[1].att.PortMappings) != 2 {
		t.Errorf("tear downs %+v", tearDowns)
	}
	if _, err := os.Stat(upstreamFile); !os.IsNotExist(err) {
		t.Errorf("upstream's checkpoint of a gone sandbox: %v", err)
	}
	if files := checkpointFiles(t, root); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
	// Upstream's loopback attachment of each goes too.
	net.mu.Lock()
	released := slices.Clone(net.released)
	net.mu.Unlock()
	if !slices.Contains(released, stopped) || !slices.Contains(released, gone) {
		t.Errorf("upstream leftovers released for %.12q, want %.12s and %.12s", released, stopped, gone)
	}
	for _, w := range logged() {
		t.Error(w)
	}
}

// The kubelet's stop of an upstream sandbox that Docker no longer has (removed while this
// cri-dockerd ran) tears its network down from upstream's checkpoint and libcni's cache.
func TestStopOfAGoneUpstreamSandboxTearsItsNetworkDown(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{cached: map[string]bool{}}
	s, _ := newAdoptService(t, fake, net, root)
	gone := "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	net.cached[gone] = true
	writeUpstreamCheckpoint(t, root, gone, upstreamCheckpointSample)
	if _, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: gone}); err != nil {
		t.Fatal(err)
	}
	if _, tearDowns := net.calls(); len(tearDowns) != 1 || tearDowns[0].sandboxID != gone || len(tearDowns[0].att.PortMappings) != 2 {
		t.Errorf("tear downs %+v, want one of %.12s with upstream's port mappings", tearDowns, gone)
	}
}

// Our own sandboxes, running or removed behind our back, have no upstream leftovers to
// release.
func TestOurSandboxesReleaseNoUpstreamLeftovers(t *testing.T) {
	fake, root := libdocker.NewFake(), t.TempDir()
	net := &adoptNet{cached: map[string]bool{}}
	s, _ := newAdoptService(t, fake, net, root, "10.77.0.7")
	ctx := context.Background()
	running, _ := runPod(t, s, "ours", "")
	gone, _ := runPod(t, s, "gone", "")
	removeBehindOurBack(t, fake, gone)
	for _, id := range []string{running, gone} {
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	if len(net.released) != 0 {
		t.Errorf("upstream leftovers released for our sandboxes %.12q", net.released)
	}
}
