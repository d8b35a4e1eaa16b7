//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/net/dns/dnsmessage"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// Pods on gVisor (Debian's runsc) through RuntimeClass, on a CNI network, beside runc pods.
// hack/docker.sh gives Docker the runtime "gvisor": runsc --network=host, which
// uses the network namespace the sandbox starts in, so the interfaces the CNI ADD makes after
// the pause container started are the pod's. Every test proves from inside the container that
// it ran on gVisor (its kernel release and gVisor's dmesg), not only from HostConfig.

const gvisorHandler = "gvisor"

// hostKernel is this machine's kernel release.
func hostKernel(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// requireGVisor fails the test when the engine has no gvisor runtime (setup was not run).
func requireGVisor(t testing.TB) {
	t.Helper()
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Runtimes[gvisorHandler]; !ok {
		t.Fatalf("dockerd has no runtime %q; hint: %s", gvisorHandler, setupHint)
	}
}

// onGVisor checks from inside container id that it runs on gVisor's kernel: a kernel release
// that is not the host's, and gVisor's boot message in dmesg.
func onGVisor(t testing.TB, d *Daemon, id string) {
	t.Helper()
	release := strings.TrimSpace(cniExec(t, d, id, "uname", "-r"))
	if release == hostKernel(t) {
		t.Errorf("container %.12s: kernel release %s is the host's: not on gVisor", id, release)
	}
	if dmesg := cniExec(t, d, id, "dmesg"); !strings.Contains(dmesg, "Starting gVisor") {
		t.Errorf("container %.12s: dmesg has no \"Starting gVisor\" (kernel %s):\n%s", id, release, dmesg)
	}
}

// onRunc checks that container id runs on the host's kernel.
func onRunc(t testing.TB, d *Daemon, id string) {
	t.Helper()
	if release := strings.TrimSpace(cniExec(t, d, id, "uname", "-r")); release != hostKernel(t) {
		t.Errorf("container %.12s: kernel release %s, want the host's %s (runc)", id, release, hostKernel(t))
	}
}

// gvisorCNIDaemon is cri-dockerd on the tests' CNI network.
func gvisorCNIDaemon(t testing.TB, extra ...string) *Daemon {
	t.Helper()
	requireGVisor(t)
	return startCNIDaemon(t, cniConfDir(t, map[string]string{"10-it.conflist": cniConflist(cniNetwork, cniBridge, cniSubnet)}), extra...)
}

// runCNIPodOn is runCNIPod on a runtime handler.
func runCNIPodOn(t testing.TB, d *Daemon, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	id := runPod(t, d, cfg, handler)
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

// gvisorPod runs a pod on handler with one container running script, and returns both IDs.
func gvisorPod(t testing.TB, d *Daemon, prefix, handler, script string, edit func(*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig)) (*runtimeapi.PodSandboxConfig, string, string) {
	t.Helper()
	cfg := newPodConfig(t, prefix)
	ctrCfg := containerConfig("app", script)
	if edit != nil {
		edit(cfg, ctrCfg)
	}
	pod := runCNIPodOn(t, d, cfg, handler)
	ctr := createContainer(t, d, pod, cfg, ctrCfg)
	startContainer(t, d, ctr)
	return cfg, pod, ctr
}

// httpFrom fetches http://ip:8080/ from inside container id with busybox nc, retrying while
// the server starts, and returns the answer.
func httpFrom(t testing.TB, d *Daemon, id, ip string) string {
	t.Helper()
	request := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s 8080`, ip, ip)
	var answer, last string
	if testutil.PollUntil(20*time.Second, 200*time.Millisecond, func() bool {
		resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", request}, Timeout: 10})
		if err == nil && strings.Contains(string(resp.Stdout), "200 OK") {
			answer = string(resp.Stdout)
			return true
		}
		last = fmt.Sprintf("stdout %q, stderr %q, err %v", resp.GetStdout(), resp.GetStderr(), err)
		return false
	}) {
		return answer
	}
	t.Fatalf("HTTP from %.12s to %s:8080: %s", id, ip, last)
	return ""
}

// A gVisor pod and a runc pod on one CNI bridge reach each other both ways by pod IP, and the
// gVisor pod's hostPort answers from the host; its pod IP is the one eth0 has inside gVisor.
func TestGVisorPodTalksToRuncPodAndServesAHostPort(t *testing.T) {
	d := gvisorCNIDaemon(t)
	hostPort := freeHostPort(t)
	serve := func(marker string) string {
		return "mkdir -p /www && echo " + marker + " > /www/index.html && trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait"
	}
	gMarker, rMarker := "from-gvisor-"+randHex(), "from-runc-"+randHex()
	_, gPod, gCtr := gvisorPod(t, d, "gv-net", gvisorHandler, serve(gMarker), func(p *runtimeapi.PodSandboxConfig, _ *runtimeapi.ContainerConfig) {
		p.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: int32(hostPort)}}
	})
	_, rPod, rCtr := gvisorPod(t, d, "rc-net", "", serve(rMarker), nil)
	onGVisor(t, d, gCtr)
	onRunc(t, d, rCtr)

	gIP, rIP := sandboxIP(t, d, gPod), sandboxIP(t, d, rPod)
	if got := podIPInside(t, d, gCtr); got != gIP {
		t.Errorf("gVisor pod: PodSandboxStatus IP %q, eth0 inside gVisor %q", gIP, got)
	}
	if answer := httpFrom(t, d, rCtr, gIP); !strings.Contains(answer, gMarker) {
		t.Errorf("runc pod -> gVisor pod: %q, want %q", answer, gMarker)
	}
	if answer := httpFrom(t, d, gCtr, rIP); !strings.Contains(answer, rMarker) {
		t.Errorf("gVisor pod -> runc pod: %q, want %q", answer, rMarker)
	}
	if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/", hostPort)); !strings.Contains(body, gMarker) {
		t.Errorf("the gVisor pod's host port %d answered %q, want %q", hostPort, body, gMarker)
	}
}

// The pod's DNS config and hostname reach a container on gVisor, and a name resolves through
// the configured server: a DNS responder of the test's own on the CNI bridge's gateway address
// answers the gVisor pod.
func TestGVisorPodDNS(t *testing.T) {
	d := gvisorCNIDaemon(t)
	name := "svc-" + randHex() + ".test."
	answer := [4]byte{10, 99, 254, 7}
	gateway := strings.TrimSuffix(cniSubnet, "0.0/16") + "0.1" // the bridge plugin's isGateway address
	cfg, _, ctr := gvisorPod(t, d, "gv-dns", gvisorHandler, sleeper, func(p *runtimeapi.PodSandboxConfig, _ *runtimeapi.ContainerConfig) {
		p.Hostname = "gv-dns-" + randHex()
		p.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{gateway}, Searches: []string{"ns1.svc.cluster.local"}, Options: []string{"ndots:5"}}
	})
	onGVisor(t, d, ctr)
	resolv := cniExec(t, d, ctr, "cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver " + gateway, "search ns1.svc.cluster.local", "options ndots:5"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("/etc/resolv.conf on gVisor lacks %q:\n%s", want, resolv)
		}
	}
	if host := strings.TrimSpace(cniExec(t, d, ctr, "hostname")); host != cfg.Hostname {
		t.Errorf("hostname on gVisor %q, want %q", host, cfg.Hostname)
	}
	// The bridge exists now that a pod is on it.
	queries := serveDNS(t, gateway+":53", name, answer)
	want := fmt.Sprintf("%d.%d.%d.%d", answer[0], answer[1], answer[2], answer[3])
	resp, err := d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"nslookup", strings.TrimSuffix(name, ".")}, Timeout: 20})
	if err != nil || !strings.Contains(string(resp.GetStdout()), want) {
		t.Errorf("nslookup %s on gVisor through %s: stdout %q stderr %q err %v, want %s", name, gateway, resp.GetStdout(), resp.GetStderr(), err, want)
	}
	if n := queries(); n == 0 {
		t.Errorf("the DNS server on %s saw no query from the gVisor pod", gateway)
	}
}

// serveDNS answers A queries for name with addr on UDP addr until the test ends (NXDOMAIN for
// other names, empty answers for other types); the function returns how many queries came.
func serveDNS(t *testing.T, listen, name string, answer [4]byte) func() int {
	t.Helper()
	conn, err := net.ListenPacket("udp4", listen)
	if err != nil {
		t.Fatalf("DNS server on %s: %v", listen, err)
	}
	t.Cleanup(func() { conn.Close() })
	var count atomic.Int32
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			count.Add(1)
			h.Response, h.Authoritative, h.RecursionAvailable = true, true, true
			b := dnsmessage.NewBuilder(nil, h)
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			switch {
			case !strings.EqualFold(q.Name.String(), name):
				h.RCode = dnsmessage.RCodeNameError
				b = dnsmessage.NewBuilder(nil, h)
				_ = b.StartQuestions()
				_ = b.Question(q)
			case q.Type == dnsmessage.TypeA:
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: answer})
			}
			if msg, err := b.Finish(); err == nil {
				_, _ = conn.WriteTo(msg, from)
			}
		}
	}()
	return func() int { return int(count.Load()) }
}

// Exec (SPDY and websocket), attach and port-forward reach a container on gVisor.
func TestGVisorExecAttachAndPortForward(t *testing.T) {
	d := gvisorCNIDaemon(t)
	_, pod, ctr := gvisorPod(t, d, "gv-st", gvisorHandler, stHTTPD("gvisor", "8080"), nil)
	onGVisor(t, d, ctr)

	for name, stream := range map[string]func(context.Context, *url.URL, remotecommand.StreamOptions) error{"spdy": stSPDY, "websocket": stWebSocket} {
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sh", "-c", "uname -r; read x; echo got $x >&2; exit 3"}, Stdin: true, Stdout: true, Stderr: true})
		var stdout, stderr bytes.Buffer
		err := stream(t.Context(), u, remotecommand.StreamOptions{Stdin: strings.NewReader("hi\n"), Stdout: &stdout, Stderr: &stderr})
		if code := stExitCode(err); code != 3 {
			t.Errorf("%s exec: exit %d (%v), want 3", name, code, err)
		}
		if got := strings.TrimSpace(stdout.String()); got == hostKernel(t) || got == "" {
			t.Errorf("%s exec: uname -r %q: not gVisor's kernel", name, got)
		}
		if stderr.String() != "got hi\n" {
			t.Errorf("%s exec: stderr %q, want \"got hi\\n\"", name, stderr.String())
		}
	}

	_, attached := gvisorPodWithStdin(t, d)
	resp, err := d.Runtime.Attach(t.Context(), &runtimeapi.AttachRequest{ContainerId: attached, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	var stdout, stderr stSyncBuffer
	stdinR, stdinW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- stSPDY(t.Context(), stParseURL(t, resp.Url), remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Stderr: &stderr})
	}()
	_, _ = stdinW.Write([]byte("hello\n"))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("attach session: %v", err)
		}
	case <-time.After(testutil.Scaled(30 * time.Second)):
		t.Fatalf("attach did not end when the container exited; stdout %q", stdout.String())
	}
	stdinW.Close()
	if out := stdout.String(); !strings.HasPrefix(out, "got hello on ") || strings.Contains(out, hostKernel(t)) {
		t.Errorf("attach stdout %q, want \"got hello on\" gVisor's kernel release", out)
	}

	local := 0
	// client-go's forwarder gives up on the first refused connection: retry the session
	// until httpd listens (gVisor's hostinet /proc/net/tcp is not the probe to wait on).
	testutil.Eventually(t, 20*time.Second, 200*time.Millisecond, func() bool {
		local = stForward(t, d, pod, 8080)
		body, err := tryGet(fmt.Sprintf("http://127.0.0.1:%d/index.html", local))
		if err == nil && body != "hello from gvisor\n" {
			t.Fatalf("GET through port-forward: %q", body)
		}
		return err == nil
	}, "port-forward to the gVisor pod's httpd never answered")
	for i := 0; i < 3; i++ {
		if got := stGet(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", local)); got != "hello from gvisor\n" {
			t.Fatalf("GET through port-forward: %q", got)
		}
	}
}

// An exec session the client abandons ends its process inside the gVisor sandbox too, with a
// terminal and without. There Docker's exec PID is runsc exec, a host process: killing it alone
// ends Docker's exec and leaves the process running in the sandbox.
func TestGVisorAbortedExecSessionLeavesNoProcess(t *testing.T) {
	d := gvisorCNIDaemon(t)
	_, _, ctr := gvisorPod(t, d, "gv-abort", gvisorHandler, "exec sleep 100000", nil)
	onGVisor(t, d, ctr)
	for _, tty := range []bool{false, true} {
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sh", "-c", "while true; do echo tick; sleep 0.05; done"}, Stdout: true, Tty: tty})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var out stSyncBuffer
		_ = stSPDY(ctx, u, remotecommand.StreamOptions{Stdout: &out, Tty: tty})
		cancel()
		if !strings.Contains(out.String(), "tick") {
			t.Fatalf("tty %v: the session's process never wrote (%q): the test proves nothing", tty, out.String())
		}
		var procs []string
		if !testutil.PollUntil(15*time.Second, 200*time.Millisecond, func() bool {
			procs = stProcesses(t, ctr)
			left := false
			for _, p := range procs {
				left = left || strings.Contains(p, "tick") || strings.Contains(p, "sleep 0.05")
			}
			return !left
		}) {
			t.Fatalf("tty %v: the abandoned session's process still runs in the sandbox: %q", tty, procs)
		}
	}
}

// gvisorPodWithStdin runs a gVisor pod whose container reads one line from its stdin, answers
// with its kernel release, and exits.
func gvisorPodWithStdin(t *testing.T, d *Daemon) (string, string) {
	t.Helper()
	_, pod, ctr := gvisorPod(t, d, "gv-attach", gvisorHandler, `read line; echo "got $line on $(uname -r)"`, func(_ *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig) {
		c.Stdin, c.StdinOnce = true, true
	})
	return pod, ctr
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

// tryGet is one GET of url: its body when it answers 200.
func tryGet(url string) (string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(body), nil
}

// A gVisor container's numbered lines are all in its CRI log, once each, across a clean restart
// and a kill of cri-dockerd while it writes.
func TestGVisorLogsAcrossARestart(t *testing.T) {
	d := gvisorCNIDaemon(t)
	cfg, _, ctr := gvisorPod(t, d, "gv-logs", gvisorHandler, `uname -r; i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo n=$i; sleep 0.01; done`, nil)
	path := filepath.Join(cfg.LogDirectory, "app.log")
	count := func() int {
		data, _ := os.ReadFile(path)
		return strings.Count(string(data), "\n")
	}
	waitFor(t, "first lines", func() bool { return count() > 30 })
	d.Restart()
	waitFor(t, "more lines", func() bool { return count() > 150 })
	_ = d.cmd.Process.Kill()
	<-d.done
	time.Sleep(300 * time.Millisecond)
	d.Start()
	// The rest of the loop: each `sleep` is a fork in the sandbox, which took 80 ms a line on a
	// loaded CI run (waitExited's 15 s ran out with the container still counting). Wait while
	// it runs, up to two minutes.
	testutil.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() bool {
		resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
		return err == nil && resp.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	}, "container still running 2 minutes after the restart (%d lines in its log at the restart)", count())
	waitExited(t, d, ctr)

	lines := readCRILog(t, path)
	if len(lines) == 0 || lines[0].content == hostKernel(t) || !strings.HasPrefix(lines[0].content, "4.") {
		t.Errorf("first log line %+v: want gVisor's kernel release", lines[:min(1, len(lines))])
	}
	seen := map[int]int{}
	for _, l := range lines[min(1, len(lines)):] {
		n, err := strconv.Atoi(strings.TrimPrefix(l.content, "n="))
		if err != nil || l.stream != "stdout" {
			t.Errorf("unexpected line %+v", l)
			continue
		}
		seen[n]++
	}
	for i := 1; i <= 400; i++ {
		if seen[i] != 1 {
			t.Errorf("n=%d appears %d times", i, seen[i])
		}
	}
}

// ContainerStats and PodSandboxStats of a gVisor pod have real figures: the CPU the container
// burned, its memory, and the pod's network counters.
func TestGVisorStats(t *testing.T) {
	d := gvisorCNIDaemon(t)
	_, pod, ctr := gvisorPod(t, d, "gv-stats", gvisorHandler, `i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; dd if=/dev/zero of=/big bs=1M count=5 2>/dev/null; touch /ready; `+sleeper, nil)
	onGVisor(t, d, ctr)
	waitFor(t, "the worker to be ready", func() bool {
		_, _, code := execIn(t, d, ctr, "test", "-f", "/ready")
		return code == 0
	})
	var st *runtimeapi.ContainerStats
	waitFor(t, "CPU and memory in ContainerStats", func() bool {
		resp, err := d.Runtime.ContainerStats(t.Context(), &runtimeapi.ContainerStatsRequest{ContainerId: ctr})
		if err != nil {
			t.Fatal(err)
		}
		st = resp.Stats
		return st.GetCpu().GetUsageCoreNanoSeconds().GetValue() > 1e6 && st.GetMemory().GetWorkingSetBytes().GetValue() > 0
	})
	t.Logf("gVisor container: cpu %d ns, working set %d B, usage %d B, writable layer %d B",
		st.Cpu.UsageCoreNanoSeconds.Value, st.Memory.WorkingSetBytes.Value, st.Memory.GetUsageBytes().GetValue(), st.GetWritableLayer().GetUsedBytes().GetValue())
	if st.Memory.GetUsageBytes().GetValue() < st.Memory.WorkingSetBytes.Value {
		t.Errorf("memory usage %d < working set %d", st.Memory.GetUsageBytes().GetValue(), st.Memory.WorkingSetBytes.Value)
	}
	if wl := st.WritableLayer; wl.GetUsedBytes().GetValue() < 5<<20 {
		t.Errorf("writable layer %v, want at least the 5 MiB of /big", wl)
	}

	// Traffic, so that the pod's interface counters have something to count.
	cniExec(t, d, ctr, "sh", "-c", "ping -c 3 -W 2 "+strings.TrimSuffix(cniSubnet, "0.0/16")+"0.1 >/dev/null 2>&1 || true")
	resp, err := d.Runtime.PodSandboxStats(t.Context(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.Stats.GetLinux()
	t.Logf("gVisor pod: cpu %d ns, memory %d B, processes %d, network %v", l.GetCpu().GetUsageCoreNanoSeconds().GetValue(), l.GetMemory().GetWorkingSetBytes().GetValue(), l.GetProcess().GetProcessCount().GetValue(), l.GetNetwork().GetDefaultInterface())
	// The pod's processes are its sandboxes' tasks (pause; sh and its sleep), as runsc counts
	// them, not the dozens of Sentry and gofer threads of the host's pids cgroup.
	if n := l.GetProcess().GetProcessCount().GetValue(); n != 3 {
		host, _ := suite.docker.ContainerStatsOneShot(t.Context(), ctr)
		var st container.StatsResponse
		if host.Body != nil {
			_ = json.NewDecoder(host.Body).Decode(&st)
			host.Body.Close()
		}
		t.Errorf("gVisor pod: %d processes, want 3: pause, sh and sleep (Docker counts %d tasks on the host for the container alone)", n, st.PidsStats.Current)
	}
	if len(l.GetContainers()) != 1 || l.Containers[0].Attributes.GetId() != ctr {
		t.Errorf("pod containers %v", l.GetContainers())
	}
	if l.GetCpu().GetUsageCoreNanoSeconds().GetValue() < st.Cpu.UsageCoreNanoSeconds.Value {
		t.Errorf("pod cpu %v < its container's %d", l.GetCpu(), st.Cpu.UsageCoreNanoSeconds.Value)
	}
	if l.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("pod memory %v", l.GetMemory())
	}
	if n := l.GetNetwork().GetDefaultInterface(); n.GetName() != "eth0" || n.GetTxBytes().GetValue() == 0 {
		t.Errorf("pod network %v, want eth0 with bytes sent", l.GetNetwork())
	}
}

// gvisorProcesses lists runsc's processes on the host (the gofer, the sandbox, runsc itself)
// whose command line names id.
func gvisorProcesses(t testing.TB, id string) []string {
	t.Helper()
	out, err := exec.Command("ps", "-eo", "pid,args").Output()
	if err != nil {
		t.Fatal(err)
	}
	var procs []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "runsc") && strings.Contains(line, id) {
			procs = append(procs, strings.TrimSpace(line))
		}
	}
	return procs
}

// Stop and removal of a gVisor pod leave nothing: no Docker container, no runsc process, no
// CNI lease, no checkpoint or log record.
func TestGVisorStopAndRemoveLeaveNothing(t *testing.T) {
	d := gvisorCNIDaemon(t)
	cfg := newPodConfig(t, "gv-rm")
	pod := runPod(t, d, cfg, gvisorHandler)
	ctr := createContainer(t, d, pod, cfg, containerConfig("app", sleeper))
	startContainer(t, d, ctr)
	onGVisor(t, d, ctr)
	if procs := gvisorProcesses(t, pod); len(procs) == 0 {
		t.Fatalf("no runsc process for the pod's sandbox %.12s: is it on gVisor?", pod)
	}
	if l := leases(t, cniNetwork, pod); len(l) != 1 {
		t.Fatalf("leases of the pod: %v", l)
	}
	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if list := podContainers(t, cfg.Metadata); len(list) != 0 {
		t.Errorf("%d Docker containers of the pod left", len(list))
	}
	var procs []string
	testutil.PollUntil(10*time.Second, 100*time.Millisecond, func() bool {
		procs = append(gvisorProcesses(t, pod), gvisorProcesses(t, ctr)...)
		return len(procs) == 0
	})
	if len(procs) != 0 {
		t.Errorf("runsc processes left after removal:\n%s", strings.Join(procs, "\n"))
	}
	if l := leases(t, cniNetwork, pod); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
	for _, dir := range []string{"sandboxes", "netns"} {
		if files := filesUnder(t, d, dir); len(files) != 0 {
			t.Errorf("files left in %s: %v", dir, files)
		}
	}
	// Log records: this pod's only (a start follows the logs of every CRI container Docker has,
	// other tests' included).
	for _, f := range filesUnder(t, d, "containerlogs") {
		if strings.HasPrefix(f, pod) || strings.HasPrefix(f, ctr) {
			t.Errorf("log record left: %s", f)
		}
	}
}
