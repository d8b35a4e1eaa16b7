//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// The deployment tools' own command lines for upstream cri-dockerd v0.4.3, unchanged, each on
// the path the tool uses (socket-activated where it uses systemd), and crictl running a pod
// through it. The node's CNI directories and our root directory are the defaults these lines
// rely on: each daemon runs in a private mount namespace where /etc/cni/net.d holds the
// tests' bridge network, /opt/cni/bin is Debian's plugins and /var/lib/cri-dockerd is empty,
// so the host's own are not touched.

const (
	nodeSocket = "/run/cri-dockerd.sock"
	// kubespray's cri-dockerd.service names the socket through /var/run, a symlink to /run.
	kubesprayEndpoint = "unix:///var/run/cri-dockerd.sock"
)

type toolCase struct {
	name string
	args []string
	// fdName is the FileDescriptorName systemd gives the passed socket (the unit's name); ""
	// when the tool starts the daemon without socket activation.
	fdName   string
	endpoint string // what crictl dials
	// before runs before the daemon starts (its cleanups run after the daemon stopped).
	before func(t *testing.T)
	check  func(t *testing.T)
}

func TestDeploymentToolCommandLines(t *testing.T) {
	crictl := crictlBinary(t)
	for _, tc := range []toolCase{
		{
			// minikube: socket-activated, its cri-docker.service ExecStart.
			name:     "minikube",
			args:     []string{"--container-runtime-endpoint", "fd://", "--pod-infra-container-image=" + pauseImage, "--network-plugin=cni", "--hairpin-mode=hairpin-veth"},
			fdName:   "cri-docker.socket",
			endpoint: "unix://" + nodeSocket,
		},
		{
			// kubespray: its cri-dockerd.socket binds %t/cri-dockerd.sock and its service names
			// the same socket as unix:///var/run/cri-dockerd.sock (Type=notify, Requires= the socket).
			name: "kubespray",
			args: []string{"--container-runtime-endpoint", kubesprayEndpoint, "--cni-conf-dir=/etc/cni/net.d", "--cni-bin-dir=/opt/cni/bin",
				"--network-plugin=cni", "--pod-cidr=10.233.64.0/18", "--pod-infra-container-image=" + pauseImage, "--log-level", "info", "--ipv6-dual-stack=True"},
			fdName:   "cri-dockerd.socket",
			endpoint: kubesprayEndpoint,
		},
		{
			// k3s-style and Rancher setups: the daemon started directly on its own socket.
			name:     "k3s",
			args:     []string{"--container-runtime-endpoint", "unix:///run/k3s/cri-dockerd/cri-dockerd.sock", "--runtime-cgroups=/system.slice/docker.service", "--ipv6-dual-stack=true"},
			endpoint: "unix:///run/k3s/cri-dockerd/cri-dockerd.sock",
			before:   restoreDockerCgroupsAtCleanup,
			check:    checkDockerdInRuntimeCgroup,
		},
	} {
		t.Run(tc.name, func(t *testing.T) { runToolCase(t, crictl, tc) })
	}
}

func runToolCase(t *testing.T, crictl string, tc toolCase) {
	socket := strings.TrimPrefix(tc.endpoint, "unix://")
	if conn, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s is served by another process; stop it (a `make run`?) before the tests", socket)
	}
	_ = os.Remove(socket)
	t.Cleanup(func() { _ = os.Remove(socket) })
	if tc.before != nil {
		tc.before(t)
	}

	dir, err := os.MkdirTemp("", "crid-it-tool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	netDir, rootDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "root")
	for _, d := range []string{netDir, rootDir, "/etc/cni/net.d", "/opt/cni/bin", "/var/lib/cri-dockerd"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(netDir, "10-it.conflist"), []byte(cniConflist(cniNetwork, cniBridge, cniSubnet)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The mounts, then (for socket activation) LISTEN_PID set to the daemon's own pid: every
	// step execs, so the shell's pid is the daemon's.
	script := fmt.Sprintf(`set -e
mount --bind %s /etc/cni/net.d
mount --bind %s /opt/cni/bin
mount --bind %s /var/lib/cri-dockerd
[ -z "$LISTEN_FDS" ] || export LISTEN_PID=$$
exec "$0" "$@"`, netDir, cniBinDir, rootDir)
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, suite.binary}, tc.args...)...)
	cmd.Env = os.Environ()
	if tc.fdName != "" {
		// What systemd does for the socket unit: bind the path, pass the socket as fd 3.
		lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: nodeSocket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		lis.SetUnlinkOnClose(false)
		f, err := lis.File()
		lis.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
		cmd.Env = append(cmd.Env, "LISTEN_FDS=1", "LISTEN_FDNAMES="+tc.fdName)
	}
	logPath := filepath.Join(dir, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(testutil.Scaled(15 * time.Second)):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("cri-dockerd %s log:\n%s", strings.Join(tc.args, " "), out)
		}
	})

	cri := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		c := exec.CommandContext(ctx, crictl, append([]string{"--runtime-endpoint", tc.endpoint, "--image-endpoint", tc.endpoint, "--timeout", "60s"}, args...)...)
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("crictl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec.CommandContext(ctx, crictl, "--runtime-endpoint", tc.endpoint, "--timeout", "2s", "version").Run()
		cancel()
		if err == nil {
			return true
		}
		select {
		case err := <-done:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("cri-dockerd exited (%v) with the %s command line:\n%s", err, tc.name, out)
		default:
		}
		return false
	}, "crictl version did not answer within 30 s")

	podCfg := newPodConfig(t, "tool-"+tc.name)
	podJSON := writeJSON(t, dir, "pod.json", map[string]any{
		"metadata":      map[string]any{"name": podCfg.Metadata.Name, "namespace": podCfg.Metadata.Namespace, "uid": podCfg.Metadata.Uid, "attempt": 1},
		"log_directory": podCfg.LogDirectory,
		"linux":         map[string]any{},
	})
	ctrJSON := writeJSON(t, dir, "ctr.json", map[string]any{
		"metadata": map[string]any{"name": "app"},
		"image":    map[string]any{"image": busyboxImage},
		"command":  []string{"sh", "-c", "echo started; sleep 1000"},
		"log_path": "app.log",
	})
	pod := cri("runp", podJSON)
	t.Cleanup(func() {
		_ = exec.Command(crictl, "--runtime-endpoint", tc.endpoint, "--timeout", "60s", "stopp", pod).Run()
		_ = exec.Command(crictl, "--runtime-endpoint", tc.endpoint, "--timeout", "60s", "rmp", pod).Run()
	})
	ctr := cri("create", pod, ctrJSON, podJSON)
	cri("start", ctr)
	if state := cri("inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr); state != "CONTAINER_RUNNING" {
		t.Errorf("container state %q, want CONTAINER_RUNNING", state)
	}
	ip := cri("inspectp", "-o", "go-template", "--template", "{{.status.network.ip}}", pod)
	if parsed := net.ParseIP(ip); parsed == nil || !strings.HasPrefix(ip, "10.99.") {
		t.Errorf("pod IP %q, want one of the CNI network %s", ip, cniSubnet)
	}
	if out := cri("exec", "-s", ctr, "echo", "hello"); out != "hello" {
		t.Errorf("crictl exec -s: %q", out)
	}
	if tc.fdName != "" {
		if log, _ := os.ReadFile(logPath); !strings.Contains(string(log), "serving the socket systemd passed") {
			t.Errorf("the daemon did not say it serves the socket systemd passed")
		}
	}
	if tc.check != nil {
		tc.check(t)
	}
	cri("stopp", pod)
	cri("rmp", pod)
	if left := podContainers(t, podCfg.Metadata); len(left) != 0 {
		t.Errorf("%d Docker containers left after crictl rmp", len(left))
	}
}

// --hairpin-mode=hairpin-veth with Docker's bridge: the pod's veth port has hairpin on.
func TestHairpinVethOnDockersBridge(t *testing.T) {
	d := StartDaemon(t, "--hairpin-mode=hairpin-veth")
	podCfg := newPodConfig(t, "hairpin")
	id := runPod(t, d, podCfg, "")
	c, err := suite.docker.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/sys/class/net/eth0/iflink", c.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	links, _ := filepath.Glob("/sys/class/net/*/ifindex")
	for _, l := range links {
		if idx, _ := os.ReadFile(l); strings.TrimSpace(string(idx)) == strings.TrimSpace(string(raw)) {
			mode, err := os.ReadFile(filepath.Join(filepath.Dir(l), "brport", "hairpin_mode"))
			if err != nil || strings.TrimSpace(string(mode)) != "1" {
				t.Errorf("%s hairpin_mode %q (%v), want 1", filepath.Dir(l), mode, err)
			}
			return
		}
	}
	t.Errorf("no host link with the pod's peer ifindex %s", raw)
}

// checkDockerdInRuntimeCgroup: --runtime-cgroups moved dockerd into the cgroup (cpu hierarchy).
func checkDockerdInRuntimeCgroup(t *testing.T) {
	pid := strconv.Itoa(dockerdPID(t))
	want := "/system.slice/docker.service"
	var line string
	if testutil.PollUntil(10*time.Second, 100*time.Millisecond, func() bool {
		line = cgroupLine(t, pid, "cpu")
		return strings.HasSuffix(line, ":"+want)
	}) {
		return
	}
	t.Errorf("dockerd (pid %s) is in %q, want the cpu hierarchy's %s", pid, line, want)
}

// restoreDockerCgroupsAtCleanup puts Docker's daemons back in the cgroups they are in now once
// the test is over, so the machine is left as it was for the tests that follow.
func restoreDockerCgroupsAtCleanup(t *testing.T) {
	pids := []string{strconv.Itoa(dockerdPID(t))}
	if out, err := exec.Command("pidof", "containerd").Output(); err == nil {
		pids = append(pids, strings.Fields(string(out))...)
	}
	saved := map[string]string{}
	for _, pid := range pids {
		if raw, err := os.ReadFile("/proc/" + pid + "/cgroup"); err == nil {
			saved[pid] = string(raw)
		}
	}
	t.Cleanup(func() {
		for pid, lines := range saved {
			for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") {
					continue
				}
				hier := "/sys/fs/cgroup/" + parts[1]
				if parts[1] == "" {
					hier = "/sys/fs/cgroup/unified"
				}
				_ = os.WriteFile(filepath.Join(hier, parts[2], "cgroup.procs"), []byte(pid), 0o644)
				_ = os.Remove(filepath.Join(hier, "system.slice", "docker.service"))
				_ = os.Remove(filepath.Join(hier, "system.slice"))
			}
		}
	})
}

// cgroupLine is the line of /proc/PID/cgroup for a controller.
func cgroupLine(t *testing.T, pid, controller string) string {
	raw, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			for _, c := range strings.Split(parts[1], ",") {
				if c == controller {
					return line
				}
			}
		}
	}
	return ""
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// crictlBinary is the crictl that test/critest/build-tools.sh builds (cached).
func crictlBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../test/critest/build-tools.sh").Output()
	if err != nil {
		t.Fatalf("test/critest/build-tools.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "crictl")
}
