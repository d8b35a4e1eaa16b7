//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// TestStatsOfARealContainer checks container and pod stats against what the container does: it
// burns some CPU, holds memory, writes 5 MiB into its writable layer and runs two processes.
func TestStatsOfARealContainer(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=") // Docker's bridge: these tests are not about networking
	podCfg := newPodConfig(t, "stats")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("worker", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; dd if=/dev/zero of=/big bs=1M count=5 2>/dev/null; touch /ready; `+sleeper)
	cfg.Labels = map[string]string{"stats": "yes"}
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)
	waitFor(t, "the worker to be ready", func() bool {
		_, _, code := execIn(t, d, ctrID, "test", "-f", "/ready")
		return code == 0
	})

	resp, err := d.Runtime.ContainerStats(t.Context(), &runtimeapi.ContainerStatsRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	if st.Attributes.GetId() != ctrID || st.Attributes.GetMetadata().GetName() != "worker" || st.Attributes.Labels["stats"] != "yes" {
		t.Errorf("attributes %v", st.Attributes)
	}
	if st.Cpu.GetTimestamp() == 0 || st.Cpu.GetUsageCoreNanoSeconds().GetValue() < 1e6 {
		t.Errorf("cpu %v: the worker has used CPU", st.Cpu)
	}
	if m := st.Memory; m.GetTimestamp() == 0 || m.GetWorkingSetBytes().GetValue() == 0 || m.GetUsageBytes().GetValue() < m.GetWorkingSetBytes().GetValue() {
		t.Errorf("memory %v", m)
	}
	// The writable layer is the container's overlay2 upper directory, measured like du.
	if wl := st.WritableLayer; wl.GetUsedBytes().GetValue() < 5<<20 || wl.GetInodesUsed().GetValue() < 2 || wl.GetFsId().GetMountpoint() == "" {
		t.Errorf("writable layer %v, want at least 5 MiB and the inodes of /big and /ready", wl)
	}

	list, err := d.Runtime.ListContainerStats(t.Context(), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"stats": "yes"}}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != ctrID {
		t.Errorf("ListContainerStats by label = %v, %v", list, err)
	}

	pod, err := d.Runtime.PodSandboxStats(t.Context(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Stats.GetLinux()
	if pod.Stats.Attributes.GetId() != sandboxID || len(l.GetContainers()) != 1 || l.Containers[0].Attributes.Id != ctrID {
		t.Errorf("pod attributes %v containers %v", pod.Stats.Attributes, l.GetContainers())
	}
	// pause, the worker's shell and its sleep.
	if l.GetProcess().GetProcessCount().GetValue() < 3 || l.GetCpu().GetUsageCoreNanoSeconds().GetValue() < st.Cpu.UsageCoreNanoSeconds.Value {
		t.Errorf("pod process %v cpu %v", l.GetProcess(), l.GetCpu())
	}
	if n := l.GetNetwork().GetDefaultInterface(); n.GetName() != "eth0" || n.GetRxBytes() == nil {
		t.Errorf("pod network %v, want eth0 of Docker's bridge", l.GetNetwork())
	}
	pods, err := d.Runtime.ListPodSandboxStats(t.Context(), &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: sandboxID}})
	if err != nil || len(pods.Stats) != 1 {
		t.Errorf("ListPodSandboxStats by id = %v, %v", pods, err)
	}
}

// Ours are Docker's figures: read from the container's cgroups (internal/stats/cgroup_stats.go) rather than
// through Docker, between two readings of Docker's own stats, CPU, network and memory figures
// lie between Docker's, and the process count of an idle container equals Docker's.
func TestStatsAreDockersFigures(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "stats-docker")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("idle", `head -c 3000000 /dev/zero | tail -c 1 >/dev/null; `+sleeper))
	startContainer(t, d, ctrID)
	time.Sleep(time.Second)
	docker := func(id string) container.StatsResponse {
		resp, err := suite.docker.ContainerStatsOneShot(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st container.StatsResponse
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	before, podBefore := docker(ctrID), docker(sandboxID)
	time.Sleep(1100 * time.Millisecond) // past statsMaxAge: ours takes a new reading
	resp, err := d.Runtime.PodSandboxStats(t.Context(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	after, podAfter := docker(ctrID), docker(sandboxID)
	l := resp.Stats.GetLinux()
	if len(l.GetContainers()) != 1 {
		t.Fatalf("pod stats %v", l)
	}
	c := l.Containers[0]
	if cpu := c.GetCpu().GetUsageCoreNanoSeconds().GetValue(); cpu < before.CPUStats.CPUUsage.TotalUsage || cpu > after.CPUStats.CPUUsage.TotalUsage {
		t.Errorf("container cpu %d ns, Docker's %d before and %d after", cpu, before.CPUStats.CPUUsage.TotalUsage, after.CPUStats.CPUUsage.TotalUsage)
	}
	// An idle container's usage still moves by a few pages (the kernel reclaims or charges
	// them: 1015808 then 1007616 B was seen on Docker 29), so ours must lie between Docker's two.
	lo, hi := min(before.MemoryStats.Usage, after.MemoryStats.Usage), max(before.MemoryStats.Usage, after.MemoryStats.Usage)
	if mem := c.GetMemory().GetUsageBytes().GetValue(); mem < lo || mem > hi {
		t.Errorf("container memory %d B, Docker's %d before and %d after", mem, before.MemoryStats.Usage, after.MemoryStats.Usage)
	}
	if lim := c.GetMemory().GetAvailableBytes().GetValue() + c.GetMemory().GetWorkingSetBytes().GetValue(); lim != after.MemoryStats.Limit {
		t.Errorf("container memory limit (available + working set) %d B, Docker's %d", lim, after.MemoryStats.Limit)
	}
	if n := l.GetProcess().GetProcessCount().GetValue(); n != podAfter.PidsStats.Current+after.PidsStats.Current {
		t.Errorf("pod processes %d, Docker's %d + %d", n, podAfter.PidsStats.Current, after.PidsStats.Current)
	}
	eth0 := l.GetNetwork().GetDefaultInterface()
	if rx := eth0.GetRxBytes().GetValue(); eth0.GetName() != "eth0" || rx < podBefore.Networks["eth0"].RxBytes || rx > podAfter.Networks["eth0"].RxBytes {
		t.Errorf("pod network %v, Docker's eth0 rx %d before and %d after", eth0, podBefore.Networks["eth0"].RxBytes, podAfter.Networks["eth0"].RxBytes)
	}
}

// BenchmarkStats answers, in one run, what the stats cache costs and saves with 10, 50 and 100
// running containers, two per pod (an app and a sidecar: 5, 25 and 50 pods, so 15, 75 and 150
// Docker containers with the sandboxes). The population is built once through CRI
// (RunPodSandbox, CreateContainer, StartContainer) and grows 10 → 50 → 100 between the
// sub-benchmarks. For each size it reports:
//
//   - list-ms/op, list-dockerd-cpu-ms/op, list-cri-cpu-ms/op: one warm ListContainerStats
//     (answered from the cache after it has filled) — wall time, dockerd's CPU, cri-dockerd's CPU;
//   - pod-ms/op, pod-dockerd-cpu-ms/op, pod-cri-cpu-ms/op: the same for ListPodSandboxStats;
//   - cold-list-ms, cold-list-dockerd-cpu-ms: the first ListContainerStats of a fresh daemon;
//   - raw-round-ms, raw-round-dockerd-cpu-ms: what a client without the cache needs for the
//     same data: one `docker ps` and one GET /containers/{id}/stats?stream=false per container
//     (what upstream cri-dockerd calls; it also inspects each container with its size, which is
//     not counted here, so the raw side is a lower bound), at most 32 in flight like the cache;
//   - raw-pod-round-ms, raw-pod-round-dockerd-cpu-ms: the same over containers and sandboxes
//     (the pods' network comes from the sandbox), what ListPodSandboxStats answers;
//   - list/raw-ms-ratio, list/raw-cpu-ratio, pod/raw-ms-ratio, pod/raw-cpu-ratio: ours / raw;
//   - bg-dockerd-cpu-ms/10s: dockerd's CPU for the cache's background refresh of containers and
//     sandboxes, per 10 s refresh period, with no RPC made;
//   - cri-idle-cpu-ms/10s: cri-dockerd's own CPU over the same idle window (its refresh
//     included; 100 ms/10s is 1% of a core);
//   - poll-dockerd-cpu-ratio: dockerd's CPU over one 10 s kubelet polling period, ours (the
//     background refresh and one ListPodSandboxStats) over raw (one raw pod round);
//   - others-dockerd-cpu-ms/s: dockerd's CPU over 5 s with neither side running: the noise
//     floor, from whatever else uses the engine. Every dockerd figure above includes it for
//     the length of its window (seconds for a raw round, 20 s for the idle window,
//     milliseconds for a call), so on a busy engine the raw side and bg look worse than they are.
//
// The two sides are measured in separate phases, not alternated with the `alternate` helper:
// the cache refreshes in the background every 10 s, and a raw round lasts seconds, so rounds
// interleaved with a running cri-dockerd would be charged with our refresh. cri-dockerd is
// stopped (SIGTERM; the pods keep running) for the raw phase and started again, with a cold
// cache, for the next. CPU times are per process, from /proc (task schedstat, nanoseconds);
// dockerd is shared, so anything else using it at the same time shows in its figures.
//
// Every Docker container of the benchmark carries the label crid-it-bench-stats=<owner>, the
// test process as PID-STARTTIME: the end of the benchmark removes them; SIGINT/SIGTERM removes
// them and stops the daemon before exiting; and each run first removes what a dead run (killed,
// timed out) left: its containers, its cri-dockerd and its directories.
//
//	go test -tags integration -run XXX -bench 'Stats|ContainerEventLatency' -benchtime 3x -timeout 30m ./integration/
func BenchmarkStats(b *testing.B) {
	sb := newStatsBench(b)
	for _, n := range []int{10, 50, 100} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) { sb.run(b, n) })
	}
}

const (
	statsBenchLabel = "crid-it-bench-stats"
	// statsBenchDirPrefix names the owner's directory in os.TempDir: the pods' log directories
	// and the record of the daemon (file "daemon": its PID identity, its directory and that of
	// its binary).
	statsBenchDirPrefix = "crid-it-bench-stats-"
	// containersPerPod: kubelet-realistic pods of one or two containers.
	containersPerPod = 2
	// rawStatsConcurrency bounds the raw side's GETs in flight, like the cache's own bound
	// (Concurrency in internal/stats/collector.go).
	rawStatsConcurrency = 32
	// statsCallsPerIter is the warm calls of each RPC per iteration: they take milliseconds.
	statsCallsPerIter = 10
	// dockerTypeLabel is the label cri-dockerd sets on every Docker container it creates.
	dockerTypeLabel = "io.kubernetes.docker.type"
)

type statsBench struct {
	owner string // statsBenchLabel's value: this process as PID-STARTTIME
	dir   string
	d     *Daemon

	mu                    sync.Mutex
	daemonID              string // procIdentity of the running cri-dockerd
	sandboxes, containers []string
	idle                  map[int]statsIdle // measured once per size
}

// statsIdle is what a size costs with no RPC made, per 10 s, and what dockerd did per second
// for others meanwhile.
type statsIdle struct{ bgDockerd, criSelf, others time.Duration }

func newStatsBench(b *testing.B) *statsBench {
	sweepStatsBench(b)
	sb := &statsBench{owner: procIdentity(os.Getpid()), idle: map[int]statsIdle{}}
	if sb.owner == "" {
		b.Fatal("cannot read /proc/self/stat")
	}
	var err error
	if sb.dir, err = os.MkdirTemp("", statsBenchDirPrefix+sb.owner+"-"); err != nil {
		b.Fatal(err)
	}
	// Registered before the daemon's own cleanup, so it runs after the daemon has stopped.
	b.Cleanup(func() {
		if err := removeLabelled(statsBenchLabel + "=" + sb.owner); err != nil {
			b.Errorf("cleanup: %v", err)
		}
		_ = os.RemoveAll(sb.dir)
	})
	sb.d = StartDaemon(b, "--network-plugin=")
	sb.recordDaemon(b)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			fmt.Fprintf(os.Stderr, "BenchmarkStats: %v: stopping cri-dockerd and removing the benchmark's containers\n", s)
			sb.mu.Lock()
			id := sb.daemonID
			sb.mu.Unlock()
			stopRecorded(id)
			if err := removeLabelled(statsBenchLabel + "=" + sb.owner); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			_ = os.RemoveAll(sb.d.Dir)
			_ = os.RemoveAll(sb.dir)
			if bin := filepath.Dir(suite.binary); strings.HasPrefix(filepath.Base(bin), "crid-it-bin-") {
				_ = os.RemoveAll(bin) // TestMain's deferred removal does not run after os.Exit
			}
			os.Exit(1)
		case <-done:
		}
	}()
	b.Cleanup(func() { signal.Stop(sig); close(done) })
	return sb
}

// recordDaemon notes the running cri-dockerd for the signal handler and for the sweep of a
// later run, should this one die without its cleanups.
func (sb *statsBench) recordDaemon(b *testing.B) {
	id := procIdentity(sb.d.cmd.Process.Pid)
	sb.mu.Lock()
	sb.daemonID = id
	sb.mu.Unlock()
	rec := id + "\n" + sb.d.Dir + "\n" + filepath.Dir(suite.binary) + "\n"
	if err := os.WriteFile(filepath.Join(sb.dir, "daemon"), []byte(rec), 0o644); err != nil {
		b.Fatal(err)
	}
}

// sweepStatsBench removes what runs that are no longer alive left behind.
func sweepStatsBench(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", statsBenchLabel))})
	if err != nil {
		b.Fatalf("docker ps: %v", err)
	}
	dead := map[string]bool{}
	for _, c := range list {
		if owner := c.Labels[statsBenchLabel]; !ownerAlive(owner) {
			dead[owner] = true
		}
	}
	for owner := range dead {
		b.Logf("removing the containers of dead run %s", owner)
		if err := removeLabelled(statsBenchLabel + "=" + owner); err != nil {
			b.Fatal(err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), statsBenchDirPrefix+"*"))
	for _, dir := range dirs {
		f := strings.SplitN(strings.TrimPrefix(filepath.Base(dir), statsBenchDirPrefix), "-", 3)
		if len(f) < 3 || ownerAlive(f[0]+"-"+f[1]) {
			continue
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "daemon")); err == nil {
			if rec := strings.Fields(string(raw)); len(rec) == 3 {
				b.Logf("stopping cri-dockerd %s of dead run %s-%s", rec[0], f[0], f[1])
				stopRecorded(rec[0])
				_ = os.RemoveAll(rec[1]) // its socket and root directory
				if strings.HasPrefix(filepath.Base(rec[2]), "crid-it-bin-") {
					_ = os.RemoveAll(rec[2]) // the binary TestMain built, which it did not remove
				}
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// stopRecorded sends SIGTERM to the process of identity id (see procIdentity), if it still
// runs, and waits up to 15 s for it to exit.
func stopRecorded(id string) {
	pidStr, _, _ := strings.Cut(id, "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || procIdentity(pid) != id {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	testutil.PollUntil(15*time.Second, 50*time.Millisecond, func() bool { return procIdentity(pid) != id })
}

// procIdentity is "PID-STARTTIME" of a running process (start time in clock ticks since boot,
// field 22 of /proc/PID/stat), which a reused PID does not match; "" when there is none.
func procIdentity(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return strconv.Itoa(pid) + "-" + f[19]
}

func ownerAlive(owner string) bool {
	pidStr, _, _ := strings.Cut(owner, "-")
	pid, err := strconv.Atoi(pidStr)
	return err == nil && procIdentity(pid) == owner
}

// removeLabelled force-removes every Docker container with the label (key=value), 8 at a time.
func removeLabelled(label string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return fmt.Errorf("docker ps --filter label=%s: %w", label, err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, 8)
	)
	for _, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			err := suite.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !client.IsErrNotFound(err) {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("remove container %s: %w", c.ID, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func (sb *statsBench) ensureDaemon(b *testing.B) {
	if !sb.d.Running() {
		sb.d.Start()
		sb.recordDaemon(b)
	}
}

// grow starts pods of containersPerPod containers, 4 at a time, until n containers run.
func (sb *statsBench) grow(b *testing.B, n int) {
	need := (n - len(sb.containers) + containersPerPod - 1) / containersPerPod
	if need <= 0 {
		return
	}
	type pod struct {
		sandbox string
		ctrs    []string
		err     error
	}
	pods := make([]pod, need)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			pods[i].sandbox, pods[i].ctrs, pods[i].err = sb.startPod(b.Context())
		}()
	}
	wg.Wait()
	for _, p := range pods {
		if p.err != nil {
			b.Fatal(p.err)
		}
		sb.sandboxes = append(sb.sandboxes, p.sandbox)
		sb.containers = append(sb.containers, p.ctrs...)
	}
}

// startPod runs a kubelet-like pod (as newPodConfig, with the benchmark's label and without a
// cleanup of its own: the benchmark removes all its containers at once).
func (sb *statsBench) startPod(ctx context.Context) (string, []string, error) {
	suffix := randHex()
	logDir := filepath.Join(sb.dir, suffix)
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return "", nil, err
	}
	labels := map[string]string{statsBenchLabel: sb.owner}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bench-stats-" + suffix, Namespace: "crid-it-" + suffix, Uid: "uid-" + suffix},
		LogDirectory: logDir,
		Labels:       labels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	run, err := sb.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", nil, fmt.Errorf("RunPodSandbox: %w", err)
	}
	var ctrs []string
	for i := range containersPerPod {
		cc := containerConfig(fmt.Sprintf("c%d", i), sleeper)
		cc.Labels = labels
		created, err := sb.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: cc, SandboxConfig: cfg})
		if err != nil {
			return "", nil, fmt.Errorf("CreateContainer: %w", err)
		}
		if _, err := sb.d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
			return "", nil, fmt.Errorf("StartContainer: %w", err)
		}
		ctrs = append(ctrs, created.ContainerId)
	}
	return run.PodSandboxId, ctrs, nil
}

func (sb *statsBench) run(b *testing.B, n int) {
	ctx := b.Context()
	sb.ensureDaemon(b)
	sb.grow(b, n)
	if len(sb.containers) != n {
		b.Fatalf("%d containers, want %d (sizes must grow, by %d)", len(sb.containers), n, containersPerPod)
	}
	nPods := len(sb.sandboxes)
	time.Sleep(2 * time.Second) // a daemon just started settles

	dockerd, cri := dockerdPID(b), sb.d.cmd.Process.Pid
	// measure runs f and returns its wall time and the CPU dockerd and cri-dockerd (unless
	// stopped: cri is 0) used meanwhile.
	measure := func(f func()) (wall, dockerdCPU, criCPU time.Duration) {
		var c0 cpuReading
		if cri != 0 {
			c0 = readCPU(b, cri)
		}
		d0, start := readCPU(b, dockerd), time.Now()
		f()
		wall, dockerdCPU = time.Since(start), readCPU(b, dockerd).since(d0)
		if cri != 0 {
			criCPU = readCPU(b, cri).since(c0)
		}
		return wall, dockerdCPU, criCPU
	}
	selector := map[string]string{statsBenchLabel: sb.owner}
	list := func() {
		resp, err := sb.d.Runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: selector}})
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Stats) != n {
			b.Fatalf("ListContainerStats: %d stats, want %d", len(resp.Stats), n)
		}
		for _, st := range resp.Stats {
			if st.Cpu == nil || st.Memory == nil {
				b.Fatalf("ListContainerStats: no cpu or memory for %s", st.Attributes.GetId())
			}
		}
	}
	pods := func() {
		resp, err := sb.d.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: selector}})
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Stats) != nPods {
			b.Fatalf("ListPodSandboxStats: %d pods, want %d", len(resp.Stats), nPods)
		}
		for _, st := range resp.Stats {
			if l := st.GetLinux(); len(l.GetContainers()) != containersPerPod || l.GetCpu() == nil || l.GetNetwork() == nil {
				b.Fatalf("ListPodSandboxStats: pod %s: %d containers, cpu %v, network %v", st.Attributes.GetId(), len(l.GetContainers()), l.GetCpu(), l.GetNetwork())
			}
		}
	}

	// Ours, with cri-dockerd running: a cold call fills the cache (and a first pod call adds the
	// sandboxes), then warm calls.
	coldWall, coldCPU, _ := measure(list)
	pods()
	var listWall, listCPU, listSelf, podWall, podCPU, podSelf time.Duration
	for range b.N {
		for range statsCallsPerIter {
			w, c, s := measure(list)
			listWall, listCPU, listSelf = listWall+w, listCPU+c, listSelf+s
			w, c, s = measure(pods)
			podWall, podCPU, podSelf = podWall+w, podCPU+c, podSelf+s
		}
	}
	// Idle: the background refresh of what the calls asked for, over two periods; then, with
	// cri-dockerd stopped, what everyone else makes dockerd do (other tests on the engine).
	idle, measured := sb.idle[n]
	if !measured {
		time.Sleep(time.Second)
		_, d, c := measure(func() { time.Sleep(2 * statsPeriod) })
		idle = statsIdle{bgDockerd: d / 2, criSelf: c / 2}
	}

	// Raw, with cri-dockerd stopped so that its refresh is not charged to the raw rounds.
	sb.d.Stop()
	cri = 0
	time.Sleep(time.Second)
	if !measured {
		_, d, _ := measure(func() { time.Sleep(5 * time.Second) })
		idle.others = d / 5
		sb.idle[n] = idle
	}
	var rawWall, rawCPU, rawPodWall, rawPodCPU time.Duration
	for i := range b.N {
		// The two rounds in alternating order, so that neither always comes first.
		rounds := []func(){
			func() {
				w, c, _ := measure(func() { rawStatsRound(b, sb.owner, false, n) })
				rawWall, rawCPU = rawWall+w, rawCPU+c
			},
			func() {
				w, c, _ := measure(func() { rawStatsRound(b, sb.owner, true, n+nPods) })
				rawPodWall, rawPodCPU = rawPodWall+w, rawPodCPU+c
			},
		}
		rounds[i%2]()
		rounds[1-i%2]()
	}

	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	calls := float64(b.N * statsCallsPerIter)
	ratio := func(a, b time.Duration) float64 {
		if b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	b.ReportMetric(0, "ns/op") // the loop mixes both sides: the metrics below say what is what
	b.ReportMetric(ms(listWall)/calls, "list-ms/op")
	b.ReportMetric(ms(listCPU)/calls, "list-dockerd-cpu-ms/op")
	b.ReportMetric(ms(listSelf)/calls, "list-cri-cpu-ms/op")
	b.ReportMetric(ms(podWall)/calls, "pod-ms/op")
	b.ReportMetric(ms(podCPU)/calls, "pod-dockerd-cpu-ms/op")
	b.ReportMetric(ms(podSelf)/calls, "pod-cri-cpu-ms/op")
	b.ReportMetric(ms(coldWall), "cold-list-ms")
	b.ReportMetric(ms(coldCPU), "cold-list-dockerd-cpu-ms")
	b.ReportMetric(ms(rawWall)/float64(b.N), "raw-round-ms")
	b.ReportMetric(ms(rawCPU)/float64(b.N), "raw-round-dockerd-cpu-ms")
	b.ReportMetric(ms(rawPodWall)/float64(b.N), "raw-pod-round-ms")
	b.ReportMetric(ms(rawPodCPU)/float64(b.N), "raw-pod-round-dockerd-cpu-ms")
	perCall := func(d time.Duration) time.Duration { return d / time.Duration(b.N*statsCallsPerIter) }
	perRound := func(d time.Duration) time.Duration { return d / time.Duration(b.N) }
	b.ReportMetric(ratio(perCall(listWall), perRound(rawWall)), "list/raw-ms-ratio")
	b.ReportMetric(ratio(perCall(listCPU), perRound(rawCPU)), "list/raw-cpu-ratio")
	b.ReportMetric(ratio(perCall(podWall), perRound(rawPodWall)), "pod/raw-ms-ratio")
	b.ReportMetric(ratio(perCall(podCPU), perRound(rawPodCPU)), "pod/raw-cpu-ratio")
	b.ReportMetric(ms(idle.bgDockerd), "bg-dockerd-cpu-ms/10s")
	b.ReportMetric(ms(idle.criSelf), "cri-idle-cpu-ms/10s")
	b.ReportMetric(ratio(idle.bgDockerd+perCall(podCPU), perRound(rawPodCPU)), "poll-dockerd-cpu-ratio")
	b.ReportMetric(ms(idle.others), "others-dockerd-cpu-ms/s")
}

// statsPeriod is the stats cache's refresh period (statsInterval in internal/stats/collector.go).
const statsPeriod = 10 * time.Second

// rawStatsRound gets what a client without the cache needs: the IDs from one `docker ps` of the
// benchmark's running containers (and sandboxes, for pod stats), then one
// GET /containers/{id}/stats?stream=false each, at most rawStatsConcurrency in flight, decoded.
func rawStatsRound(b *testing.B, owner string, withSandboxes bool, want int) {
	ctx := b.Context()
	args := filters.NewArgs(filters.Arg("label", statsBenchLabel+"="+owner), filters.Arg("status", "running"))
	if !withSandboxes {
		args.Add("label", dockerTypeLabel+"=container")
	}
	list, err := suite.docker.ContainerList(ctx, container.ListOptions{Filters: args})
	if err != nil {
		b.Fatal(err)
	}
	if len(list) != want {
		b.Fatalf("docker ps: %d containers, want %d", len(list), want)
	}
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, rawStatsConcurrency)
		errs = make(chan error, len(list))
	)
	for _, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := suite.docker.ContainerStats(ctx, c.ID, false)
			if err != nil {
				errs <- err
				return
			}
			defer r.Body.Close()
			var st container.StatsResponse
			if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
				errs <- fmt.Errorf("stats of %s: %w", c.ID, err)
			} else if st.Read.IsZero() {
				errs <- fmt.Errorf("stats of %s: not running", c.ID)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// dockerdPID is the shared dockerd's PID.
func dockerdPID(tb testing.TB) int {
	tb.Helper()
	raw, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		tb.Fatalf("dockerd pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		tb.Fatalf("dockerd pid: %v", err)
	}
	return pid
}

// cpuReading is a process's CPU time two ways: the sum of its threads' run time from
// /proc/PID/task/*/schedstat (nanoseconds, but a thread that exited takes its time with it),
// and utime+stime from /proc/PID/stat (exited threads included, 10 ms ticks).
type cpuReading struct{ sched, ticks time.Duration }

// since is the CPU time used since prev: the precise sum unless the ticks show more, which
// means threads exited in between.
func (r cpuReading) since(prev cpuReading) time.Duration {
	sched, ticks := r.sched-prev.sched, r.ticks-prev.ticks
	if sched < 0 || ticks > sched+20*time.Millisecond {
		return ticks
	}
	return sched
}

// readCPU reads a process's CPU time; it fails the benchmark when the process is gone (a
// dockerd restarted under the benchmark would make its figures meaningless).
func readCPU(tb testing.TB, pid int) cpuReading {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		tb.Fatalf("process %d: %v", pid, err)
	}
	s := string(stat)
	// Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	r := cpuReading{ticks: time.Duration(utime+stime) * time.Second / clockTicks}
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		tb.Fatalf("process %d: %v", pid, err)
	}
	for _, t := range tasks {
		raw, err := os.ReadFile(dir + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		if f := strings.Fields(string(raw)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			r.sched += time.Duration(ns)
		}
	}
	return r
}

// TestPodSandboxMetricsOfARealPod checks the CRI metrics that only the node can give (processes,
// open files and sockets, OOM kills, kernel memory) besides Docker's, and that each metric has
// the labels its descriptor announces.
func TestPodSandboxMetricsOfARealPod(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "metrics")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("app", `nc -l -p 8080 & `+sleeper)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 1024, MemoryLimitInBytes: 64 << 20}
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)

	descs, err := d.Runtime.ListMetricDescriptors(t.Context(), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]int{}
	for _, desc := range descs.Descriptors {
		labels[desc.Name] = len(desc.LabelKeys)
	}
	var values map[string]uint64
	// The metrics come from the stats cache, refreshed every 10 s: the sample Docker took at the
	// start may predate the container's later processes (nc, sleep), so wait for them too.
	waitFor(t, "the listener to open its socket and the cache to see all three processes", func() bool {
		resp, err := d.Runtime.ListPodSandboxMetrics(t.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		values = map[string]uint64{}
		for _, pm := range resp.PodMetrics {
			if pm.PodSandboxId != sandboxID {
				continue
			}
			all := pm.Metrics
			for _, cm := range pm.ContainerMetrics {
				if cm.ContainerId == ctrID {
					all = append(all, cm.Metrics...)
				}
			}
			for _, m := range all {
				if n, ok := labels[m.Name]; !ok || n != len(m.LabelValues) {
					t.Fatalf("metric %s has %d labels, its descriptor %d", m.Name, len(m.LabelValues), n)
				}
				if _, seen := values[m.Name]; !seen {
					values[m.Name] = m.Value.GetValue()
				}
			}
		}
		return values["container_sockets"] > 0 && values["container_threads"] >= 3
	})
	for name, min := range map[string]uint64{
		"container_processes": 3, "container_file_descriptors": 3, "container_threads": 3,
		"container_spec_cpu_shares": 1024, "container_spec_cpu_period": 100000, "container_spec_memory_limit_bytes": 64 << 20,
		"container_memory_working_set_bytes": 1, "container_network_receive_packets_total": 0, "container_oom_events_total": 0,
		"container_memory_kernel_usage": 0, "container_start_time_seconds": 1, "container_fs_usage_bytes": 0, "container_fs_inodes_total": 1,
	} {
		if got, ok := values[name]; !ok || got < min {
			t.Errorf("%s = %d (reported: %v), want at least %d", name, got, ok, min)
		}
	}
}
