//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// Pod networking with --network-plugin=cni and Debian's reference plugins (package
// containernetworking-plugins, in /usr/lib/cni): a bridge of the tests' own on a subnet of its
// own, so that nothing of the node's (Docker's bridge, /etc/cni/net.d) is touched. Every
// address the tests reach is on this machine: the host's loopback and pods on that bridge.

const (
	cniBinDir  = "/usr/lib/cni"
	cniNetwork = "crid-it"      // host-local keeps its leases in /var/lib/cni/networks/crid-it
	cniBridge  = "crid-it0"     // at most 15 characters
	cniSubnet  = "10.99.0.0/16" // a subnet of the tests' bridge alone
	// The fault tests use a network of their own, so that their leases are easy to count.
	cniFaultNetwork = "crid-it-fault"
	cniFaultBridge  = "crid-itf0"
	cniFaultSubnet  = "10.98.0.0/16"
)

// cniConflist is the shipped sample's chain on the tests' bridge, with extra plugins appended.
func cniConflist(name, bridge, subnet string, extra ...string) string {
	plugins := []string{
		fmt.Sprintf(`{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}`, bridge, subnet),
		`{"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}`,
		`{"type": "firewall", "backend": "iptables"}`,
		`{"type": "bandwidth", "capabilities": {"bandwidth": true}}`,
	}
	plugins = append(plugins, extra...)
	plugins = append(plugins, `{"type": "loopback"}`)
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [%s]}`, name, strings.Join(plugins, ",\n"))
}

// cniConfDir makes a config directory holding files (name -> content).
func cniConfDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crid-it-cni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startCNIDaemon runs cri-dockerd with the CNI plugin on confDir and Debian's plugins.
func startCNIDaemon(t testing.TB, confDir string, extra ...string) *Daemon {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		t.Fatalf("CNI plugins missing (%v); hint: %s", err, setupHint)
	}
	return StartDaemon(t, append([]string{"--network-plugin=cni", "--cni-conf-dir", confDir, "--cni-bin-dir", cniBinDir}, extra...)...)
}

// runCNIPod runs a sandbox and, when the test ends, stops and removes it through cri-dockerd
// (so that its CNI DEL runs) before the harness force-removes whatever is left.
func runCNIPod(t testing.TB, d *Daemon, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	id := runPod(t, d, cfg, "")
	t.Cleanup(func() {
		if !d.Running() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("cleanup: StopPodSandbox: %v", err)
		}
		if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("cleanup: RemovePodSandbox: %v", err)
		}
	})
	return id
}

// cniExec runs cmd in a container and returns its stdout; a non-zero exit fails the test.
func cniExec(t testing.TB, d *Daemon, id string, cmd ...string) string {
	t.Helper()
	resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
	if err != nil {
		t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	if resp.ExitCode != 0 {
		t.Fatalf("ExecSync %v: exit %d, stdout %q, stderr %q", cmd, resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return string(resp.Stdout)
}

// podIPInside is the IPv4 address of eth0 as `ip addr` inside the pod shows it.
func podIPInside(t testing.TB, d *Daemon, ctrID string) string {
	t.Helper()
	out := cniExec(t, d, ctrID, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	for _, f := range strings.Fields(out) {
		if ip, _, err := net.ParseCIDR(f); err == nil {
			return ip.String()
		}
	}
	t.Fatalf("no IPv4 address on eth0 in the pod: %q", out)
	return ""
}

func sandboxIP(t testing.TB, d *Daemon, id string) string {
	t.Helper()
	resp, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	return resp.Status.GetNetwork().GetIp()
}

// leases lists the addresses host-local holds for sandbox id in network.
func leases(t testing.TB, network, id string) []string {
	t.Helper()
	dir := filepath.Join("/var/lib/cni/networks", network)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue // lock, last_reserved_ip.0
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), id) {
			out = append(out, e.Name())
		}
	}
	return out
}

// masqueradeRules counts the bridge plugin's NAT rules for sandbox id.
func masqueradeRules(t testing.TB, id string) int {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	return strings.Count(string(out), id)
}

// httpGet fetches url, retrying for 15 s while the server starts.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second}
	var answer string
	var last error
	if testutil.PollUntil(15*time.Second, 100*time.Millisecond, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			last = err
			return false
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			answer = string(body)
			return true
		}
		last = fmt.Errorf("status %s, body %q, %v", resp.Status, body, err)
		return false
	}) {
		return answer
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}

func TestCNIPodsReachEachOtherAndAHostPort(t *testing.T) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	hostPort := freeHostPort(t)
	marker := "served-by-pod-a-" + randHex()

	serverCfg := newPodConfig(t, "cni-srv")
	serverCfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: int32(hostPort)}}
	server := runCNIPod(t, d, serverCfg)
	httpd := createContainer(t, d, server, serverCfg, containerConfig("httpd", "mkdir -p /www && echo "+marker+" > /www/index.html && trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait"))
	startContainer(t, d, httpd)

	clientCfg := newPodConfig(t, "cni-cli")
	client := runCNIPod(t, d, clientCfg)
	sleeperID := createContainer(t, d, client, clientCfg, containerConfig("app", sleeper))
	startContainer(t, d, sleeperID)

	serverIP := sandboxIP(t, d, server)
	if ip := net.ParseIP(serverIP); ip == nil || !mustSubnet(cniSubnet).Contains(ip) {
		t.Fatalf("server pod IP %q is not on the CNI bridge's subnet %s", serverIP, cniSubnet)
	}
	if got := podIPInside(t, d, httpd); got != serverIP {
		t.Errorf("PodSandboxStatus IP %s, `ip addr` in the pod %s", serverIP, got)
	}
	if clientIP := sandboxIP(t, d, client); clientIP == serverIP || clientIP == "" {
		t.Errorf("client pod IP %q (server %q)", clientIP, serverIP)
	}

	// Pod to pod by IP: an HTTP request from the client pod to the server pod. (busybox nc:
	// the test image's dynamically linked busybox wget crashes on this VM.)
	request := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s 8080`, serverIP, serverIP)
	var answer string
	if !testutil.PollUntil(15*time.Second, 100*time.Millisecond, func() bool {
		resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: sleeperID, Cmd: []string{"sh", "-c", request}, Timeout: 10})
		answer = fmt.Sprintf("%q (stderr %q, err %v)", resp.GetStdout(), resp.GetStderr(), err)
		return err == nil && strings.Contains(string(resp.Stdout), "200 OK") && strings.Contains(string(resp.Stdout), marker)
	}) {
		t.Fatalf("HTTP from the client pod to %s:8080: %s", serverIP, answer)
	}

	// The host port, from the host.
	if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/", hostPort)); !strings.Contains(body, marker) {
		t.Errorf("host port %d answered %q, want %q", hostPort, body, marker)
	}
}

func mustSubnet(cidr string) *net.IPNet {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	return n
}

func TestCNIDNSConfigAndHostnameInEveryContainer(t *testing.T) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	cfg := newPodConfig(t, "cni-dns")
	cfg.Hostname = "dns-pod-" + randHex()
	cfg.DnsConfig = &runtimeapi.DNSConfig{
		Servers:  []string{"10.99.255.53", "10.99.255.54"},
		Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local"},
		Options:  []string{"ndots:5", "timeout:2"},
	}
	pod := runCNIPod(t, d, cfg)
	for _, name := range []string{"one", "two"} {
		id := createContainer(t, d, pod, cfg, containerConfig(name, sleeper))
		startContainer(t, d, id)
		resolv := cniExec(t, d, id, "cat", "/etc/resolv.conf")
		for _, want := range []string{"nameserver 10.99.255.53", "nameserver 10.99.255.54", "search ns1.svc.cluster.local svc.cluster.local", "options ndots:5 timeout:2"} {
			if !strings.Contains(resolv, want) {
				t.Errorf("container %s: /etc/resolv.conf lacks %q:\n%s", name, want, resolv)
			}
		}
		if host := strings.TrimSpace(cniExec(t, d, id, "hostname")); host != cfg.Hostname {
			t.Errorf("container %s: hostname %q, want %q", name, host, cfg.Hostname)
		}
	}
}

func TestCNIPodIPIsTheSameAfterARestart(t *testing.T) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	cfg := newPodConfig(t, "cni-restart")
	pod := runCNIPod(t, d, cfg)
	ctr := createContainer(t, d, pod, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctr)
	inside := podIPInside(t, d, ctr)
	if before := sandboxIP(t, d, pod); before != inside {
		t.Fatalf("PodSandboxStatus IP %q, `ip addr` in the pod %q", before, inside)
	}
	d.Restart()
	if after := sandboxIP(t, d, pod); after != inside {
		t.Errorf("after a restart PodSandboxStatus IP %q, want %q", after, inside)
	}
	if again := podIPInside(t, d, ctr); again != inside {
		t.Errorf("the pod's address changed: %q -> %q", inside, again)
	}
}

func TestCNIStopReleasesTheIPTwiceAndAfterTheSandboxIsGone(t *testing.T) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	ctx := t.Context()

	// A normal stop, twice.
	pod := runCNIPod(t, d, newPodConfig(t, "cni-stop"))
	if l := leases(t, cniNetwork, pod); len(l) != 1 || l[0] != sandboxIP(t, d, pod) {
		t.Fatalf("leases of the running pod = %v, want its IP %s", l, sandboxIP(t, d, pod))
	}
	for i := 0; i < 2; i++ {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatalf("StopPodSandbox %d: %v", i+1, err)
		}
		if l := leases(t, cniNetwork, pod); len(l) != 0 {
			t.Errorf("after stop %d the pod still holds %v", i+1, l)
		}
	}
	if n := masqueradeRules(t, pod); n != 0 {
		t.Errorf("%d NAT rules of the stopped pod left", n)
	}

	// docker rm -f of the sandbox, then the kubelet's stop.
	gone := runCNIPod(t, d, newPodConfig(t, "cni-gone"))
	if err := suite.docker.ContainerRemove(ctx, gone, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if l := leases(t, cniNetwork, gone); len(l) != 1 {
		t.Fatalf("leases after docker rm -f = %v, want the pod's one still held", l)
	}
	for i := 0; i < 2; i++ {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: gone}); err != nil {
			t.Fatalf("StopPodSandbox %d of a removed sandbox: %v", i+1, err)
		}
	}
	if l := leases(t, cniNetwork, gone); len(l) != 0 {
		t.Errorf("the removed sandbox still holds %v", l)
	}
	// The namespace was pinned: the bridge plugin's DEL ran inside it and cleaned its NAT rules.
	if n := masqueradeRules(t, gone); n != 0 {
		t.Errorf("%d NAT rules of the removed sandbox left", n)
	}
	for _, sub := range []string{"sandboxes", "netns"} {
		if entries, _ := os.ReadDir(filepath.Join(d.Dir, "root", sub)); len(entries) != 0 {
			t.Errorf("%s left in the root directory: %v", sub, entries)
		}
	}
}

func TestCNIFaultsFailRunPodSandboxAndLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conflist string
		code     codes.Code
		want     []string
	}{
		{
			name:     "broken config",
			conflist: `{"cniVersion": "1.0.0", "name": "broken", "plugins": [{"type": "bridge",}]}`,
			code:     codes.FailedPrecondition,
			want:     []string{"network plugin cni is not ready", "10-fault.conflist", "error parsing configuration"},
		},
		{
			name:     "missing plugin",
			conflist: cniConflist(cniFaultNetwork, cniFaultBridge, cniFaultSubnet, `{"type": "crid-no-such-plugin"}`),
			code:     codes.FailedPrecondition,
			want:     []string{`failed to find plugin "crid-no-such-plugin"`, cniBinDir},
		},
		{
			// The bridge plugin attaches the pod and host-local leases an address, then tuning
			// fails on a sysctl that does not exist: the DEL must give the address back.
			name:     "add fails halfway",
			conflist: cniConflist(cniFaultNetwork, cniFaultBridge, cniFaultSubnet, `{"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.crid_no_such_sysctl": "1"}}`),
			code:     codes.Unknown,
			want:     []string{`plugin type="tuning"`, "crid_no_such_sysctl", cniFaultNetwork},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-fault.conflist": tc.conflist}))
			before, _ := os.ReadDir(filepath.Join("/var/lib/cni/networks", cniFaultNetwork))
			cfg := newPodConfig(t, "cni-fault")
			_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			wantCode(t, err, tc.code, tc.want...)
			if left := podContainers(t, cfg.Metadata); len(left) != 0 {
				t.Errorf("%d containers left behind", len(left))
			}
			after, _ := os.ReadDir(filepath.Join("/var/lib/cni/networks", cniFaultNetwork))
			if leaseCount(after) != leaseCount(before) {
				t.Errorf("host-local leases of %s: %v before, %v after", cniFaultNetwork, names(before), names(after))
			}
			for _, sub := range []string{"sandboxes", "netns"} {
				if entries, _ := os.ReadDir(filepath.Join(d.Dir, "root", sub)); len(entries) != 0 {
					t.Errorf("%s left in the root directory: %v", sub, names(entries))
				}
			}
			// The daemon serves on: a host-network pod needs no CNI.
			host := newPodConfig(t, "cni-fault-host")
			host.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
			runCNIPod(t, d, host)
		})
	}
}

// leaseCount counts the leases of a host-local directory (files named by an address; the
// others are its lock and last-reserved files).
func leaseCount(entries []os.DirEntry) int {
	n := 0
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			n++
		}
	}
	return n
}

func names(entries []os.DirEntry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func networkReady(t testing.TB, d *Daemon) *runtimeapi.RuntimeCondition {
	t.Helper()
	resp, err := d.Runtime.Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	t.Fatal("Status has no NetworkReady condition")
	return nil
}

func TestCNINetworkReadyTurnsTrueWhenAConfigAppears(t *testing.T) {
	dir := cniConfDir(t, nil)
	d := startCNIDaemon(t, dir)
	c := networkReady(t, d)
	if c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, "no CNI network config in "+dir) {
		t.Errorf("NetworkReady with an empty config directory = %+v, want false, naming the directory", c)
	}
	cfg := newPodConfig(t, "cni-early")
	_, err := d.Runtime.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	wantCode(t, err, codes.FailedPrecondition, "no CNI network config in "+dir)
	if left := podContainers(t, cfg.Metadata); len(left) != 0 {
		t.Errorf("%d containers left behind", len(left))
	}
	// A host-network pod runs meanwhile (that is how CNI daemonsets install their config).
	host := newPodConfig(t, "cni-early-host")
	host.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	runCNIPod(t, d, host)

	// Installed as installers do: written elsewhere, renamed in.
	tmp := filepath.Join(dir, ".10-it.conflist.tmp")
	if err := os.WriteFile(tmp, []byte(cniConflist(cniNetwork, cniBridge, cniSubnet)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "10-it.conflist")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, "NetworkReady", func() bool { return networkReady(t, d).Status })
	t.Logf("NetworkReady %s after the config appeared", time.Since(start).Round(time.Millisecond))
	pod := runCNIPod(t, d, newPodConfig(t, "cni-late"))
	if ip := sandboxIP(t, d, pod); !mustSubnet(cniSubnet).Contains(net.ParseIP(ip)) {
		t.Errorf("pod IP %q not on %s", ip, cniSubnet)
	}
}

func TestCNIBandwidthAnnotationsAndMTU(t *testing.T) {
	d := startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}), "--network-plugin-mtu", "1400")
	cfg := newPodConfig(t, "cni-bw")
	cfg.Annotations = map[string]string{"kubernetes.io/ingress-bandwidth": "1M", "kubernetes.io/egress-bandwidth": "2M"}
	pod := runCNIPod(t, d, cfg)
	ctr := createContainer(t, d, pod, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctr)
	if mtu := strings.TrimSpace(cniExec(t, d, ctr, "cat", "/sys/class/net/eth0/mtu")); mtu != "1400" {
		t.Errorf("eth0 MTU in the pod = %s, want 1400 (--network-plugin-mtu)", mtu)
	}
	// The host's end of the pod's veth shapes what the pod receives.
	peer := strings.TrimSpace(cniExec(t, d, ctr, "cat", "/sys/class/net/eth0/iflink"))
	index, err := strconv.Atoi(peer)
	if err != nil {
		t.Fatalf("iflink %q: %v", peer, err)
	}
	veth, err := net.InterfaceByIndex(index)
	if err != nil {
		t.Fatalf("host end of the pod's veth (index %d): %v", index, err)
	}
	out, err := exec.Command("tc", "qdisc", "show", "dev", veth.Name).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "rate 1Mbit") {
		t.Errorf("qdisc of %s: %s (%v), want tbf rate 1Mbit", veth.Name, out, err)
	}
}

// --- benchmarks -------------------------------------------------------------------------------

// BenchmarkRunPodSandboxCNIVersusDockerBridge times RunPodSandbox with --network-plugin=cni
// (NetworkMode none, then bridge + host-local + portmap + firewall + bandwidth + loopback) and
// with --network-plugin="" (Docker's bridge), alternating the two in one run. Teardown is not
// timed.
//
//	go test -tags integration -run XXX -bench RunPodSandboxCNI -benchtime=20x ./integration/
func BenchmarkRunPodSandboxCNIVersusDockerBridge(b *testing.B) {
	cni := startCNIDaemon(b, cniConfDir(b, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	bridge := StartDaemon(b)
	var cniTotal, bridgeTotal time.Duration
	one := func(d *Daemon, total *time.Duration) {
		cfg := newPodConfig(b, "bench-net")
		start := time.Now()
		id := runPod(b, d, cfg, "")
		*total += time.Since(start)
		b.StopTimer()
		ctx := context.Background()
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			one(cni, &cniTotal)
			one(bridge, &bridgeTotal)
		} else {
			one(bridge, &bridgeTotal)
			one(cni, &cniTotal)
		}
	}
	b.StopTimer()
	ms := func(total time.Duration) float64 { return float64(total.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(cniTotal), "cni-ms/op")
	b.ReportMetric(ms(bridgeTotal), "bridge-ms/op")
}

// BenchmarkPodSandboxStatus50Pods times PodSandboxStatus while 50 CNI pods run: the pod IPs
// come from the checkpoint files, nothing is forked. The pods are started once.
//
//	go test -tags integration -run XXX -bench PodSandboxStatus50 -benchtime=500x ./integration/
func BenchmarkPodSandboxStatus50Pods(b *testing.B) {
	d := startCNIDaemon(b, cniConfDir(b, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}))
	const pods = 50
	ids := make([]string, pods)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range ids {
		cfg := newPodConfig(b, "bench-status")
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			resp, err := d.Runtime.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				b.Error(err)
				return
			}
			ids[i] = resp.PodSandboxId
		}()
	}
	wg.Wait()
	b.Cleanup(func() {
		for _, id := range ids {
			if id == "" {
				continue
			}
			ctx := context.Background()
			d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		}
	})
	if b.Failed() {
		b.FailNow()
	}
	b.Run("status", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := d.Runtime.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: ids[i%pods]})
			if err != nil || resp.Status.Network.Ip == "" {
				b.Fatalf("PodSandboxStatus: %v (network %v)", err, resp.GetStatus().GetNetwork())
			}
		}
	})
}
