package core

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// leasePlugin is a CNI plugin for tests, run by the real libcni: ADD leases the next address of
// 10.99.0.0/24 in a file named after it that holds the container ID (as host-local does); DEL
// releases the container's lease and logs what it was called with.
const leasePlugin = `#!/bin/sh
cat >/dev/null
d=%s
case "$CNI_COMMAND" in
ADD)
	n=$(cat "$d/next" 2>/dev/null || echo 2)
	echo $((n + 1)) >"$d/next"
	echo "$CNI_CONTAINERID" >"$d/leases/10.99.0.$n"
	printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%%s","sandbox":"%%s"}],"ips":[{"address":"10.99.0.%%s/24","interface":0}]}' "$CNI_IFNAME" "$CNI_NETNS" "$n"
	;;
DEL)
	echo "$CNI_CONTAINERID netns=$CNI_NETNS ifname=$CNI_IFNAME args=$CNI_ARGS" >>"$d/dels"
	for f in "$d"/leases/*; do
		if [ -f "$f" ] && [ "$(cat "$f")" = "$CNI_CONTAINERID" ]; then rm -f "$f"; fi
	done
	;;
VERSION)
	echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}'
	;;
esac
exit 0
`

// cniNode is a node's CNI set up for unit tests, all in temporary directories: the config, the
// lease plugin, libcni's cache, the leases and the DEL log. The sandboxes' root directory and
// pins outlive each service built on it, as they outlive a restart of cri-dockerd.
type cniNode struct {
	root, confDir, binDir, cacheDir, state string
	pins                                   *fakePins
}

func newCNINode(t *testing.T) *cniNode {
	t.Helper()
	dir := t.TempDir()
	n := &cniNode{root: filepath.Join(dir, "root"), confDir: filepath.Join(dir, "net.d"), binDir: filepath.Join(dir, "bin"),
		cacheDir: filepath.Join(dir, "cache"), state: filepath.Join(dir, "plugin"), pins: &fakePins{}}
	for _, d := range []string{n.confDir, n.binDir, filepath.Join(n.state, "leases")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := `{"cniVersion":"1.0.0","name":"leasenet","plugins":[{"type":"lease"}]}`
	if err := os.WriteFile(filepath.Join(n.confDir, "10-lease.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(leasePlugin, "%s", strconv.Quote(n.state), 1)
	script = strings.ReplaceAll(script, "%%", "%")
	if err := os.WriteFile(filepath.Join(n.binDir, "lease"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// start builds a service on the node, as a start of cri-dockerd does.
func (n *cniNode) start(t *testing.T, fake *libdocker.Fake) *Service {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	cni, err := network.NewCNI(network.CNIOptions{ConfDir: n.confDir, BinDirs: []string{n.binDir}, CacheDir: n.cacheDir, Logger: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cni.Close() })
	s := newTestService(t, fake, Options{NetworkPlugin: "cni", Network: cni, RootDirectory: n.root})
	s.pins = n.pins
	return s
}

// leases maps each leased address to its sandbox.
func (n *cniNode) leases(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.state, "leases"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(n.state, "leases", e.Name()))
		out[e.Name()] = strings.TrimSpace(string(b))
	}
	return out
}

// dels are the plugin's DEL calls, one line each.
func (n *cniNode) dels(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.state, "dels"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// cached lists libcni's cache entries of sandbox id.
func (n *cniNode) cached(t *testing.T, id string) []string {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(n.cacheDir, "results", "*-"+id+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func (n *cniNode) checkpoint(id string) string {
	return filepath.Join(n.root, "sandboxes", id+".json")
}

// damages are the ways a checkpoint is found lost: cut short, overwritten, emptied, deleted.
var damages = []struct {
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
		garbage := make([]byte, 300)
		for i := range garbage {
			garbage[i] = byte(i * 7)
		}
		return os.WriteFile(path, garbage, 0o600)
	}},
	{"empty", func(path string) error { return os.Truncate(path, 0) }},
	{"missing", os.Remove},
}

func stopSandbox(s *Service, id string) error {
	_, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func removeSandbox(s *Service, id string) error {
	_, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// countContaining counts the lines that contain every one of words.
func countContaining(lines []string, words ...string) int {
	n := 0
	for _, l := range lines {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			n++
		}
	}
	return n
}

// A checkpoint lost while its pod runs, then a restart: the pod keeps its IP, read from
// libcni's cache, and its stop releases the lease with the DEL the ADD's record makes (the
// pod's CNI_ARGS, in its running namespace). A second stop and the removal have nothing to do.
func TestLostCheckpointIsRebuiltFromLibcniCacheAndTheLeaseReleased(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			fake, node := libdocker.NewFake(), newCNINode(t)
			s := node.start(t, fake)
			id, _ := runPod(t, s, "web", "")
			ip := sandboxStatus(t, s, id).Network.Ip
			if ip == "" || node.leases(t)[ip] != id {
				t.Fatalf("pod IP %q, leases %v", ip, node.leases(t))
			}
			if err := d.damage(node.checkpoint(id)); err != nil {
				t.Fatal(err)
			}

			s = node.start(t, fake)
			logged := warnings(s)
			for i := 0; i < 3; i++ {
				if got := sandboxStatus(t, s, id).Network.Ip; got != ip {
					t.Fatalf("status %d after the restart: IP %q, want %q", i+1, got, ip)
				}
			}
			if n := countContaining(logged(), "rebuilt the network checkpoint"); n != 1 {
				t.Errorf("the rebuild logged %d times, want once: %q", n, logged())
			}
			if cp, err := s.checkpoints.get(id); err != nil || cp == nil || cp.Network.Name != "web" {
				t.Errorf("checkpoint after the rebuild: %+v, %v", cp, err)
			}

			c, _ := fake.InspectContainer(context.Background(), id)
			for i := 0; i < 2; i++ {
				if err := stopSandbox(s, id); err != nil {
					t.Fatalf("stop %d: %v", i+1, err)
				}
			}
			dels := node.dels(t)
			netns := "/proc/" + strconv.Itoa(c.State.Pid) + "/ns/net"
			if len(dels) != 1 || countContaining(dels, id, "netns="+netns, "ifname=eth0", "K8S_POD_NAMESPACE=ns", "K8S_POD_NAME=web") != 1 {
				t.Errorf("DELs %q, want one of %.12s in %s with the pod's CNI_ARGS", dels, id, netns)
			}
			if leases := node.leases(t); len(leases) != 0 {
				t.Errorf("leases left: %v", leases)
			}
			if err := removeSandbox(s, id); err != nil {
				t.Fatal(err)
			}
			if left := append(checkpointFiles(t, node.root), node.cached(t, id)...); len(left) != 0 || node.pins.count() != 0 {
				t.Errorf("left: %v, %d pins", left, node.pins.count())
			}
			if n := len(node.dels(t)); n != 1 {
				t.Errorf("%d DELs after the removal, want still 1", n)
			}
		})
	}
}

// Lost with libcni's record of it too: the status has no IP, and the stop fails with DataLoss
// saying what is missing, logged once, stopping nothing: the lease is not leaked silently.
func TestLostCheckpointWithoutLibcniCacheFailsStopClearly(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			fake, node := libdocker.NewFake(), newCNINode(t)
			s := node.start(t, fake)
			id, _ := runPod(t, s, "web", "")
			if err := d.damage(node.checkpoint(id)); err != nil {
				t.Fatal(err)
			}
			for _, f := range node.cached(t, id) {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}

			s = node.start(t, fake)
			logged := warnings(s)
			for i := 0; i < 3; i++ {
				if got := sandboxStatus(t, s, id).Network.Ip; got != "" {
					t.Fatalf("status IP %q from nothing", got)
				}
			}
			for i := 0; i < 2; i++ {
				err := stopSandbox(s, id)
				if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "ns/web") || !strings.Contains(err.Error(), "CNI cache") {
					t.Fatalf("stop %d = %v, want DataLoss naming the pod and the missing cache", i+1, err)
				}
				if d.name == "missing" && !strings.Contains(err.Error(), "is missing") || d.name != "missing" && !strings.Contains(err.Error(), "cannot be read") && !strings.Contains(err.Error(), "invalid") && !strings.Contains(err.Error(), "unexpected end") {
					t.Errorf("stop %d = %v, want it to say what is wrong with the checkpoint", i+1, err)
				}
			}
			if err := removeSandbox(s, id); status.Code(err) != codes.DataLoss {
				t.Errorf("remove = %v, want DataLoss too", err)
			}
			if n := countContaining(logged(), id); n != 1 {
				t.Errorf("logged %d times, want once: %q", n, logged())
			}
			if !running(t, fake, id) || len(node.leases(t)) != 1 || len(node.dels(t)) != 0 {
				t.Errorf("after the failed stops: running %v, leases %v, DELs %q", running(t, fake, id), node.leases(t), node.dels(t))
			}
		})
	}
}

// A reboot with the checkpoint lost: the pause container is stopped, the pin is gone, and only
// libcni's cache tells. The stop runs the DEL from it, without a namespace.
func TestLostCheckpointAfterARebootIsTornDownFromLibcniCache(t *testing.T) {
	fake, node := libdocker.NewFake(), newCNINode(t)
	s := node.start(t, fake)
	id, _ := runPod(t, s, "web", "")
	if err := os.Remove(node.checkpoint(id)); err != nil {
		t.Fatal(err)
	}
	if err := fake.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	node.pins = &fakePins{}

	s = node.start(t, fake)
	if st := sandboxStatus(t, s, id); st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("state %v", st.State)
	}
	if err := stopSandbox(s, id); err != nil {
		t.Fatal(err)
	}
	if dels := node.dels(t); len(dels) != 1 || countContaining(dels, id, "netns= ", "K8S_POD_NAME=web") != 1 {
		t.Errorf("DELs %q, want one of %.12s without a namespace", dels, id)
	}
	if err := stopSandbox(s, id); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := removeSandbox(s, id); err != nil {
		t.Fatal(err)
	}
	if left := append(checkpointFiles(t, node.root), node.cached(t, id)...); len(left) != 0 || len(node.leases(t)) != 0 || len(node.dels(t)) != 1 {
		t.Errorf("left: %v, leases %v, DELs %q", left, node.leases(t), node.dels(t))
	}
}

// A sandbox removed behind our back whose checkpoint is damaged too: the next start tears its
// network down from libcni's cache, the pod's name taken from the cached CNI_ARGS.
func TestDamagedCheckpointOfAGoneSandboxIsTornDownAtStart(t *testing.T) {
	fake, node := libdocker.NewFake(), newCNINode(t)
	s := node.start(t, fake)
	id, _ := runPod(t, s, "web", "")
	if err := os.WriteFile(node.checkpoint(id), []byte(`{"version":1,"sandb`), 0o600); err != nil {
		t.Fatal(err)
	}
	removeBehindOurBack(t, fake, id)

	node.start(t, fake)
	if dels := node.dels(t); len(dels) != 1 || countContaining(dels, id, "K8S_POD_NAMESPACE=ns", "K8S_POD_NAME=web") != 1 {
		t.Errorf("DELs %q, want one of %.12s with the cached CNI_ARGS", dels, id)
	}
	if left := append(checkpointFiles(t, node.root), node.cached(t, id)...); len(left) != 0 || len(node.leases(t)) != 0 {
		t.Errorf("left: %v, leases %v", left, node.leases(t))
	}
}

// A sandbox that Docker networks (the node's network here) never has a checkpoint of ours: an
// unreadable file under its name is dropped, and nothing is torn down.
func TestUnreadableCheckpointOfAHostNetworkSandboxIsDropped(t *testing.T) {
	fake, node := libdocker.NewFake(), newCNINode(t)
	s := node.start(t, fake)
	cfg := sandboxConfig("host")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}}
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.PodSandboxId
	if err := os.WriteFile(node.checkpoint(id), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := stopSandbox(s, id); err != nil {
		t.Fatal(err)
	}
	if files := checkpointFiles(t, node.root); len(files) != 0 || len(node.dels(t)) != 0 {
		t.Errorf("checkpoints %v, DELs %q", files, node.dels(t))
	}
}

// `docker rm -f` of a sandbox whose checkpoint is gone too: only libcni's cache and the pin
// know of it, and the kubelet's stop by its full ID runs the DEL from there, in the pinned
// namespace.
func TestStopOfAGoneSandboxWithoutCheckpointRunsTheDELFromLibcniCache(t *testing.T) {
	fake, node := libdocker.NewFake(), newCNINode(t)
	s := node.start(t, fake)
	id, _ := runPod(t, s, "web", "")
	if err := os.Remove(node.checkpoint(id)); err != nil {
		t.Fatal(err)
	}
	removeBehindOurBack(t, fake, id)
	for i := 0; i < 2; i++ {
		if err := stopSandbox(s, id); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
	}
	if dels := node.dels(t); len(dels) != 1 || countContaining(dels, id, "netns=/pins/"+id, "K8S_POD_NAME=web") != 1 {
		t.Errorf("DELs %q, want one of %.12s in its pinned namespace", dels, id)
	}
	if left := append(checkpointFiles(t, node.root), node.cached(t, id)...); len(left) != 0 || len(node.leases(t)) != 0 || node.pins.count() != 0 {
		t.Errorf("left: %v, leases %v, %d pins", left, node.leases(t), node.pins.count())
	}
}
