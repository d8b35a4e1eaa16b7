//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// Helpers of the fault and concurrency tests (fault_test.go, concurrency_test.go): a CNI network
// of one test's own, kubelet-like pods of one namespace, a kubelet-style cleanup, and the
// leftovers that a pod can leave (Docker containers, files of the root directory, mounts, IP
// leases, veths, NAT rules, log files).

// Kill SIGKILLs the daemon, and only the daemon, as systemd does with our unit
// (KillMode=process): a CNI plugin it was running finishes on its own. With ProcessGroup, Kill
// then waits until those have exited, as the unit's RestartSec leaves them the time to. The
// socket stays behind, as after a crash. The connection is closed only after the kill, so that
// no call in flight is cancelled before.
func (d *Daemon) Kill() {
	d.t.Helper()
	pid := d.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		d.t.Fatalf("SIGKILL cri-dockerd: %v", err)
	}
	<-d.done
	if d.ProcessGroup {
		var left []string
		if !testutil.PollUntil(time.Minute, 10*time.Millisecond, func() bool {
			left = processGroup(pid)
			return len(left) == 0
		}) {
			d.t.Fatalf("processes of the killed cri-dockerd still run after a minute: %v", left)
		}
	}
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

// processGroup lists the live processes (not zombies) of process group pgid, with their
// command lines.
func processGroup(pgid int) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so after its last ')'.
		_, rest, _ := strings.Cut(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " ")
		f := strings.Fields(rest)
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// ownDockerd starts a dockerd of the test's own, of the run's engine (Docker 29 on the Docker 29
// run), with the test images. The fault and concurrency tests need one: a daemon resumes the
// logs of every CRI container of its engine at each start, so on the shared engine its restarts
// would write other tests' log files (and other tests' daemons these pods' files), and its
// goroutines would follow other tests' containers.
func ownDockerd(t *testing.T) *PrivateDockerd {
	t.Helper()
	pd := StartPrivateDockerdWith(t, PrivateDockerdOptions{Docker29: sharedEngineMajor(t) >= 29}, busyboxImage, pauseImage)
	if v, err := pd.Client.ServerVersion(t.Context()); err == nil {
		t.Logf("private dockerd: Docker %s, API %s", v.Version, v.APIVersion)
	}
	return pd
}

// kubelet's labels on every sandbox and container it makes.
const (
	podNameLabel      = "io.kubernetes.pod.name"
	podNamespaceLabel = "io.kubernetes.pod.namespace"
	podUIDLabel       = "io.kubernetes.pod.uid"
	sandboxIDLabel    = "io.kubernetes.sandbox.id" // ours, on the Docker containers
)

// ownCNI is a CNI network of one test's own: its own name (so its own host-local lease
// directory), bridge and /24, so that leases, veths and rules can be counted whatever else
// runs on the machine.
type ownCNI struct {
	Name, Bridge, Subnet, ConfDir string
}

// newOwnCNI writes the tests' usual chain (bridge with host-local, portmap, firewall,
// bandwidth, loopback) for a fresh network on a free 10.150.N.0/24. The bridge and the lease
// directory are removed when the test ends.
func newOwnCNI(t testing.TB, prefix string) *ownCNI {
	t.Helper()
	suffix := randHex()[:6]
	n := &ownCNI{Name: "crid-it-" + prefix + "-" + suffix, Bridge: "crid" + prefix[:1] + suffix}
	used, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	for i := 0; i < 256 && n.Subnet == ""; i++ {
		if p := fmt.Sprintf("10.150.%d.", i); !strings.Contains(string(used), " "+p) {
			n.Subnet = p + "0/24"
		}
	}
	if n.Subnet == "" {
		t.Fatal("no free 10.150.N.0/24 for the test's CNI network")
	}
	n.ConfDir = cniConfDir(t, map[string]string{"10-" + prefix + ".conflist": cniConflist(n.Name, n.Bridge, n.Subnet)})
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.Bridge).Run()
		os.RemoveAll(n.leaseDir())
	})
	return n
}

func (n *ownCNI) leaseDir() string { return filepath.Join("/var/lib/cni/networks", n.Name) }

// Leases lists the addresses host-local holds in the network, with their owner (the file's
// first line: the sandbox ID).
func (n *ownCNI) Leases(t testing.TB) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(n.leaseDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue // lock, last_reserved_ip.0
		}
		b, _ := os.ReadFile(filepath.Join(n.leaseDir(), e.Name()))
		first, _, _ := strings.Cut(string(b), "\n")
		out[e.Name()] = strings.TrimSpace(first) // host-local ends its lines with \r\n
	}
	return out
}

// Veths lists the interfaces attached to the network's bridge (one per pod set up).
func (n *ownCNI) Veths(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show", "master", n.Bridge).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "does not exist") || strings.Contains(string(out), "Cannot find device") {
			return nil // no pod was ever set up
		}
		t.Fatalf("ip link show master %s: %v: %s", n.Bridge, err, out)
	}
	var veths []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			veths = append(veths, strings.TrimSuffix(f[1], ":"))
		}
	}
	return veths
}

// natRulesOf lists, per sandbox ID, the rules of the nat table that name it (the bridge
// plugin's masquerade, portmap's DNAT chains).
func natRulesOf(t testing.TB, ids []string) map[string][]string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v: %s", err, out)
	}
	found := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, id := range ids {
			if strings.Contains(line, id) {
				found[id] = append(found[id], line)
			}
		}
	}
	return found
}

// rootLeftovers lists what is left in the daemon's root directory for pods: sandbox checkpoints
// (ours and upstream's), netns pins, log position records, image volume mounts, and any mount
// under the root directory. (The daemon must be alone on its Docker engine: it resumes the logs
// of every CRI container the engine has, and keeps their records.)
func rootLeftovers(t testing.TB, d *Daemon) []string {
	t.Helper()
	root := filepath.Join(d.Dir, "root")
	var left []string
	for _, sub := range []string{"sandboxes", "sandbox", "netns", "containerlogs", "image-volumes"} {
		entries, err := os.ReadDir(filepath.Join(root, sub))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			left = append(left, sub+"/"+e.Name())
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			left = append(left, "mount "+f[4])
		}
	}
	return left
}

// filesUnderDir lists the regular files below dir (log files left in pods' log directories).
func filesUnderDir(t testing.TB, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !e.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// kubeletPods makes kubelet-like pods of one namespace of their own: the kubelet's pod labels,
// a log directory per pod under one directory, as /var/log/pods.
type kubeletPods struct {
	Namespace string
	LogRoot   string
	docker    *client.Client // the engine the daemon uses
}

func newKubeletPods(t testing.TB, prefix string, docker *client.Client) *kubeletPods {
	t.Helper()
	k := &kubeletPods{Namespace: "crid-it-" + prefix + "-" + randHex(), LogRoot: t.TempDir(), docker: docker}
	// Whatever happened, the harness removes every Docker container of the namespace.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		list, err := k.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: k.dockerFilter()})
		if err != nil {
			t.Errorf("cleanup: docker ps: %v", err)
			return
		}
		for _, c := range list {
			if err := k.docker.ContainerRemove(ctx, c.ID, containerRemoveForce); err != nil {
				t.Errorf("cleanup: remove container %s: %v", c.ID, err)
			}
		}
	})
	return k
}

func (k *kubeletPods) dockerFilter() filters.Args {
	return filters.NewArgs(filters.Arg("label", podNamespaceLabel+"="+k.Namespace))
}

// Pod is a pod's sandbox config, its log directory created as the kubelet does.
func (k *kubeletPods) Pod(t testing.TB, name string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	uid := "uid-" + randHex()
	logDir := filepath.Join(k.LogRoot, k.Namespace+"_"+name+"_"+uid)
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: k.Namespace, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{podNameLabel: name, podNamespaceLabel: k.Namespace, podUIDLabel: uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// Container is the config of a container of pod: a sleeper that says hello, its log at
// NAME/0.log (the kubelet creates NAME/).
func (k *kubeletPods) Container(t testing.TB, pod *runtimeapi.PodSandboxConfig, name string) *runtimeapi.ContainerConfig {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(pod.LogDirectory, name), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig(name, "echo hello from "+name+"; "+sleeper)
	cfg.LogPath = name + "/0.log"
	cfg.Labels = map[string]string{"io.kubernetes.container.name": name}
	for _, key := range []string{podNameLabel, podNamespaceLabel, podUIDLabel} {
		cfg.Labels[key] = pod.Labels[key]
	}
	return cfg
}

// podContainers lists the Docker containers of a pod, in any state, by their names.
func (k *kubeletPods) podContainers(t testing.TB, m *runtimeapi.PodSandboxMetadata) []container.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := k.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: podNameFilter(m)})
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return list
}

// criView is the sandboxes and containers of the namespace with their states, as listed by
// the CRI or as Docker's containers say they must be listed.
type criView struct {
	Sandboxes  map[string]runtimeapi.PodSandboxState
	Containers map[string]runtimeapi.ContainerState
}

func (v criView) String() string {
	var parts []string
	for id, st := range v.Sandboxes {
		parts = append(parts, "sandbox "+id[:12]+" "+strings.TrimPrefix(st.String(), "SANDBOX_"))
	}
	for id, st := range v.Containers {
		parts = append(parts, "container "+id[:12]+" "+strings.TrimPrefix(st.String(), "CONTAINER_"))
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, ", ") + "]"
}

func (v criView) equal(w criView) bool {
	if len(v.Sandboxes) != len(w.Sandboxes) || len(v.Containers) != len(w.Containers) {
		return false
	}
	for id, st := range v.Sandboxes {
		if got, ok := w.Sandboxes[id]; !ok || got != st {
			return false
		}
	}
	for id, st := range v.Containers {
		if got, ok := w.Containers[id]; !ok || got != st {
			return false
		}
	}
	return true
}

func (v criView) ids() []string {
	var ids []string
	for id := range v.Sandboxes {
		ids = append(ids, id)
	}
	for id := range v.Containers {
		ids = append(ids, id)
	}
	return ids
}

// dockerView is what the CRI must list for the namespace, from Docker's containers: each
// sandbox container (READY when it runs), each container (by Docker's state), and a sandbox
// Docker no longer has while its containers or its checkpoint remain (NOTREADY).
func (k *kubeletPods) dockerView(t testing.TB, d *Daemon) criView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := k.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: k.dockerFilter()})
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	v := criView{Sandboxes: map[string]runtimeapi.PodSandboxState{}, Containers: map[string]runtimeapi.ContainerState{}}
	for _, c := range list {
		switch c.Labels[dockerTypeLabel] {
		case "podsandbox":
			v.Sandboxes[c.ID] = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			if c.State == "running" {
				v.Sandboxes[c.ID] = runtimeapi.PodSandboxState_SANDBOX_READY
			}
		case "container":
			v.Containers[c.ID] = dockerContainerState(c.State)
		}
	}
	for _, c := range list {
		if id := c.Labels[sandboxIDLabel]; c.Labels[dockerTypeLabel] == "container" && id != "" {
			if _, ok := v.Sandboxes[id]; !ok {
				v.Sandboxes[id] = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join(d.Dir, "root", "sandboxes"))
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(id, ".") {
			continue
		}
		if _, err := k.docker.ContainerInspect(ctx, id); client.IsErrNotFound(err) {
			if _, ok := v.Sandboxes[id]; !ok {
				v.Sandboxes[id] = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			}
		}
	}
	return v
}

// dockerContainerState is the CRI state of a Docker state name.
func dockerContainerState(s string) runtimeapi.ContainerState {
	switch s {
	case "created":
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case "running", "paused", "restarting":
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case "exited", "dead":
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

// criListView is what ListPodSandbox and ListContainers report for the namespace. Sandboxes are
// listed unfiltered and kept by their metadata: a sandbox known only from its checkpoint has
// no labels.
func (k *kubeletPods) criListView(t testing.TB, d *Daemon) criView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sandboxes, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	containers, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{podNamespaceLabel: k.Namespace}}})
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	v := criView{Sandboxes: map[string]runtimeapi.PodSandboxState{}, Containers: map[string]runtimeapi.ContainerState{}}
	for _, sb := range sandboxes.Items {
		if sb.GetMetadata().GetNamespace() == k.Namespace || sb.Labels[podNamespaceLabel] == k.Namespace {
			v.Sandboxes[sb.Id] = sb.State
		}
	}
	for _, c := range containers.Containers {
		v.Containers[c.Id] = c.State
	}
	return v
}

// checkListsMatchDocker checks that the CRI lists are what Docker's containers say. The CRI's
// lists are compared with a Docker view taken before and after them, and the comparison is
// made again when the two Docker views differ (a container whose stop Docker was finishing).
func (k *kubeletPods) checkListsMatchDocker(t testing.TB, d *Daemon, when string) criView {
	t.Helper()
	var before, got, after criView
	for attempt := 0; attempt < 5; attempt++ {
		before = k.dockerView(t, d)
		got = k.criListView(t, d)
		after = k.dockerView(t, d)
		if before.equal(after) {
			break
		}
	}
	if !before.equal(after) {
		t.Errorf("%s: Docker's containers keep changing: %v, then %v", when, before, after)
	} else if !got.equal(before) {
		t.Errorf("%s: the CRI lists %v, Docker has %v", when, got, before)
	}
	return before
}

// kubeletCleanup does what the kubelet does for pods it no longer wants, with what it lists:
// every container and sandbox is stopped, then every container is removed (its log file first,
// from the path ContainerStatus reports), then every sandbox. Every call must succeed.
func (k *kubeletPods) kubeletCleanup(t testing.TB, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listed := k.criListView(t, d)
	for id := range listed.Containers {
		if _, err := d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
			t.Errorf("cleanup: StopContainer %s: %v", id, err)
		}
	}
	for id := range listed.Sandboxes {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("cleanup: StopPodSandbox %s: %v", id, err)
		}
	}
	for id := range listed.Containers {
		st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Errorf("cleanup: ContainerStatus %s: %v", id, err)
		} else if path := st.GetStatus().GetLogPath(); path != "" {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cleanup: remove log %s: %v", path, err)
			}
		}
		if _, err := d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("cleanup: RemoveContainer %s: %v", id, err)
		}
	}
	for id := range listed.Sandboxes {
		if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("cleanup: RemovePodSandbox %s: %v", id, err)
		}
	}
}

// checkNothingLeftOf checks that the namespace's pods left nothing: no Docker container (by
// label, and by name for the given pods), no file or mount in the root directory, no lease,
// veth or NAT rule of the network, no log file in the pods' log directories. ids are every
// sandbox and container ID seen, for the NAT rules. It returns the number of leftovers.
func (k *kubeletPods) checkNothingLeftOf(t testing.TB, d *Daemon, n *ownCNI, pods []*runtimeapi.PodSandboxConfig, ids []string, when string) int {
	t.Helper()
	left := 0
	report := func(what string, items any) {
		left++
		t.Errorf("%s: %s left: %v", when, what, items)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := k.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: k.dockerFilter()})
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	if len(list) > 0 {
		var names []string
		for _, c := range list {
			names = append(names, c.ID[:12]+" "+strings.Join(c.Names, ",")+" "+c.State)
		}
		report("Docker containers of the namespace", names)
	}
	for _, pod := range pods {
		if byName := k.podContainers(t, pod.Metadata); len(byName) > 0 {
			report("Docker containers named after pod "+pod.Metadata.Name, len(byName))
		}
	}
	if files := rootLeftovers(t, d); len(files) > 0 {
		report("in the root directory", files)
	}
	if n != nil {
		if l := n.Leases(t); len(l) > 0 {
			report("host-local leases of "+n.Name, l)
		}
		if v := n.Veths(t); len(v) > 0 {
			report("veths on "+n.Bridge, v)
		}
		if r := natRulesOf(t, ids); len(r) > 0 {
			report("NAT rules naming sandboxes", r)
		}
	}
	if files := filesUnderDir(t, k.LogRoot); len(files) > 0 {
		report("log files", files)
	}
	return left
}

// metricsAddr is the address of the daemon's metrics listener (--metrics-bind-addr
// 127.0.0.1:0, with --enable-pprof for goroutineDump), from the last start in its log.
func metricsAddr(t testing.TB, d *Daemon) string {
	t.Helper()
	addr := ""
	for _, line := range strings.Split(d.readLog(), "\n") {
		if strings.Contains(line, `msg="metrics listening"`) {
			if _, rest, ok := strings.Cut(line, "address="); ok {
				addr = strings.Trim(strings.Fields(rest)[0], `"`)
			}
		}
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("metrics address %q not found in the log", addr)
	}
	return addr
}

// goroutineDump is /debug/pprof/goroutine?debug=1 of the daemon: its count (the first line,
// "goroutine profile: total N") and the whole dump. On a busy machine the answer can take longer
// than a read's bound (once in CI: no answer in 30 s, at a time the suite ran nine times slower
// than usual), so a read that fails is tried twice more; each failure is logged with the load.
func goroutineDump(t testing.TB, addr string) (int, string) {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var n int
		var dump string
		if n, dump, err = fetchGoroutines(addr); err == nil {
			return n, dump
		}
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("read %d of the goroutine profile: %v (loadavg %s)", attempt, err, strings.TrimSpace(string(load)))
	}
	t.Fatal(err)
	return 0, ""
}

// fetchGoroutines reads the goroutine profile, bounded by testutil.Scaled(30 s). The request closes its
// connection, so that it leaves no goroutine of its own behind.
func fetchGoroutines(addr string) (int, string, error) {
	client := &http.Client{Timeout: testutil.Scaled(30 * time.Second), Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, "", fmt.Errorf("goroutine profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("goroutine profile: %s (pprof is served only with --enable-pprof)", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("goroutine profile: %w", err)
	}
	first, _, _ := strings.Cut(string(body), "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))
	if err != nil {
		return 0, "", fmt.Errorf("goroutine profile: first line %q", first)
	}
	return n, string(body), nil
}
