package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// startedContainer creates and starts a container in a pod.
func startedContainer(t *testing.T, s *Service, podID string, podCfg *runtimeapi.PodSandboxConfig, name string) string {
	t.Helper()
	id := createContainer(t, s, podID, podCfg, name)
	if _, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

func statIDs(stats []*runtimeapi.ContainerStats) []string {
	var out []string
	for _, st := range stats {
		out = append(out, st.Attributes.Id)
	}
	slices.Sort(out)
	return out
}

func TestListContainerStatsServesRunningContainersFromTheCache(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podA, cfgA := runPod(t, s, "a", "")
	podB, cfgB := runPod(t, s, "b", "")
	a1 := startedContainer(t, s, podA, cfgA, "a1")
	b1 := startedContainer(t, s, podB, cfgB, "b1")
	createContainer(t, s, podA, cfgA, "created") // not running: no stats
	if err := fake.SetStats(b1, container.StatsResponse{
		CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 5e9}},
		MemoryStats: container.MemoryStats{Usage: 100 << 20, Limit: 1 << 30, Stats: map[string]uint64{"inactive_file": 30 << 20, "anon": 60 << 20, "pgfault": 7, "pgmajfault": 2}},
		PidsStats:   container.PidsStats{Current: 3},
	}); err != nil {
		t.Fatal(err)
	}

	fake.ResetCalls()
	resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := statIDs(resp.Stats), statIDs([]*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: a1}}, {Attributes: &runtimeapi.ContainerAttributes{Id: b1}}}); !slices.Equal(got, want) {
		t.Fatalf("stats of %v, want the running containers %v", got, want)
	}
	for _, st := range resp.Stats {
		if st.Cpu.GetTimestamp() == 0 || st.Memory.GetTimestamp() == 0 || st.Attributes.Metadata.GetName() == "" || st.Attributes.Labels["tier"] != "web" {
			t.Errorf("incomplete stats %v", st)
		}
		if st.Attributes.Id != b1 {
			continue
		}
		m := st.Memory
		if st.Cpu.UsageCoreNanoSeconds.GetValue() != 5e9 || m.WorkingSetBytes.GetValue() != 70<<20 || m.UsageBytes.GetValue() != 100<<20 ||
			m.RssBytes.GetValue() != 60<<20 || m.PageFaults.GetValue() != 7 || m.MajorPageFaults.GetValue() != 2 || m.AvailableBytes.GetValue() != (1<<30)-(70<<20) {
			t.Errorf("cgroup v2 stats converted to cpu %v memory %v", st.Cpu, m)
		}
		if info, _ := fake.Info(context.Background()); st.WritableLayer == nil || st.WritableLayer.FsId.GetMountpoint() != info.DockerRootDir {
			t.Errorf("writable layer %v", st.WritableLayer)
		}
	}
	if n := fake.Calls("ContainerStats"); n != 2 {
		t.Errorf("%d Docker stats calls for 2 running containers", n)
	}

	// The kubelet's next call comes within the refresh period: no Docker stats call at all.
	fake.ResetCalls()
	for range 5 {
		if _, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n, d := fake.Calls("ContainerStats"), fake.Calls("DiskUsage"); n != 0 || d != 0 {
		t.Errorf("cached calls made %d stats and %d disk usage calls to Docker", n, d)
	}
	if n := fake.Calls("ListContainers"); n != 5 {
		t.Errorf("%d list calls for 5 RPCs, want one each", n)
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"by id prefix", &runtimeapi.ContainerStatsFilter{Id: a1[:12]}, []string{a1}},
		{"by pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: podB}, []string{b1}},
		{"by labels", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "a1"}}, []string{a1}},
		{"by labels, no match", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"tier": "db"}}, nil},
	} {
		resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		if got := statIDs(resp.Stats); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContainerStatsOfOneContainer(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "one", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id[:12]})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Stats.Attributes.Id != id || resp.Stats.Cpu.GetTimestamp() == 0 || resp.Stats.Memory.GetWorkingSetBytes().GetValue() != 8<<20 {
		t.Errorf("ContainerStats = %v", resp.Stats)
	}
	created := createContainer(t, s, podID, podCfg, "idle")
	resp, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: created})
	if err != nil || resp.Stats.Attributes.Id != created || resp.Stats.Cpu != nil {
		t.Errorf("stats of a created container = %v, %v; want attributes only", resp.GetStats(), err)
	}
	_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "0123456789ab"})
	wantCode(t, err, codes.NotFound)
	_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{})
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: podID})
	wantCode(t, err, codes.NotFound)
}

func TestStatsCallsToDockerAreBoundedAndShared(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "busy", "")
	for i := range 20 {
		startedContainer(t, s, podID, podCfg, "c"+string(rune('a'+i)))
	}
	fake.SetStatsDelay(20 * time.Millisecond)
	fake.ResetCalls()
	// Three concurrent callers on a cold cache: one Docker call per container in all.
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			if err == nil && len(resp.Stats) != 20 {
				t.Errorf("%d stats, want 20", len(resp.Stats))
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.MaxConcurrentStats(); got > statsConcurrency || got < 2 {
		t.Errorf("%d stats calls in flight at most, want 2..%d", got, statsConcurrency)
	}
	if n := fake.Calls("ContainerStats"); n != 20 {
		t.Errorf("%d Docker stats calls, want one per container (20)", n)
	}
	if n := fake.Calls("InspectContainer"); n != 20 {
		t.Errorf("%d inspects, want one per container, once", n)
	}
}

func TestStatsAreRefreshedInTheBackgroundAndGiveACPURate(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	s.stats.interval, s.stats.staleAfter, s.stats.keep = 50*time.Millisecond, time.Hour, time.Hour
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "bg", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	first, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if first.Stats.Cpu.UsageNanoCores != nil {
		t.Errorf("a CPU rate from a single sample: %v", first.Stats.Cpu)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fake.Calls("ContainerStats") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no background refresh: %d stats calls", fake.Calls("ContainerStats"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	next, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's container uses a tenth of a core.
	rate := next.Stats.Cpu.GetUsageNanoCores().GetValue()
	if rate < 5e7 || rate > 2e8 || next.Stats.Cpu.Timestamp <= first.Stats.Cpu.Timestamp {
		t.Errorf("cpu after refresh %v (first %v), want about 1e8 nano cores", next.Stats.Cpu, first.Stats.Cpu)
	}

	// Containers nobody asks about are forgotten; removed ones stop being sampled.
	s.stats.mu.Lock()
	s.stats.keep = 0
	s.stats.mu.Unlock()
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		s.stats.mu.Lock()
		n := len(s.stats.entries)
		s.stats.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stats entries kept", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPodSandboxStatsSumsTheContainersAndTakesTheSandboxNetwork(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "pod", "")
	c1 := startedContainer(t, s, podID, podCfg, "c1")
	c2 := startedContainer(t, s, podID, podCfg, "c2")
	otherPod, otherCfg := runPod(t, s, "other", "")
	startedContainer(t, s, otherPod, otherCfg, "x")
	for _, id := range []string{podID, c1, c2} {
		if err := fake.SetStats(id, container.StatsResponse{
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 1e9}},
			MemoryStats: container.MemoryStats{Usage: 10 << 20, Stats: map[string]uint64{"total_inactive_file": 1 << 20}},
			PidsStats:   container.PidsStats{Current: 2},
			Networks:    map[string]container.NetworkStats{"eth0": {RxBytes: 42, TxBytes: 24}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	if st.Attributes.Id != podID || st.Attributes.Metadata.GetName() != "pod" || st.Attributes.Labels["app"] != "pod" {
		t.Errorf("attributes %v", st.Attributes)
	}
	l := st.Linux
	if l.Cpu.UsageCoreNanoSeconds.GetValue() != 3e9 || l.Memory.WorkingSetBytes.GetValue() != 27<<20 || l.Process.ProcessCount.GetValue() != 6 {
		t.Errorf("pod sums: cpu %v memory %v process %v", l.Cpu, l.Memory, l.Process)
	}
	if l.Network.GetDefaultInterface().GetName() != "eth0" || l.Network.DefaultInterface.RxBytes.GetValue() != 42 {
		t.Errorf("pod network %v", l.Network)
	}
	if got := statIDs(l.Containers); !slices.Equal(got, statIDs([]*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: c1}}, {Attributes: &runtimeapi.ContainerAttributes{Id: c2}}})) {
		t.Errorf("pod containers %v", got)
	}

	list, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.Stats) != 2 {
		t.Fatalf("ListPodSandboxStats = %v, %v; want both pods", list, err)
	}
	list, err = s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "other"}}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != otherPod || len(list.Stats[0].Linux.Containers) != 1 {
		t.Errorf("ListPodSandboxStats by label = %v, %v", list, err)
	}

	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: otherPod}); err != nil {
		t.Fatal(err)
	}
	_, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: otherPod})
	wantCode(t, err, codes.NotFound)
	_, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

func TestWritableLayerIsMeasuredLikeDu(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "f"), make([]byte, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a", "f"), filepath.Join(dir, "a", "b", "g")); err != nil {
		t.Fatal(err)
	}
	u, err := walkUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// dir, a, b and one file (hard-linked twice).
	if u.inodes != 4 || u.bytes < 10000 || !u.hasInodes {
		t.Errorf("usage %+v", u)
	}
	if _, err := walkUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing directory")
	}
}

// panickyStats is a Docker client whose stats calls panic, as a bug in decoding would.
type panickyStats struct{ *libdocker.Fake }

func (panickyStats) ContainerStats(context.Context, string) (container.StatsResponse, error) {
	panic("decoder bug")
}

// A panic in the background stats refresh fails that refresh, not the daemon.
func TestPanicInStatsRefreshIsAnError(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	s.stats.docker = panickyStats{fake}
	podID, podCfg := runPod(t, s, "panic", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	_, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("ContainerStats with a panicking refresh: %v, want an error saying it panicked", err)
	}
	// The service still answers.
	if _, err := s.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version after the panic: %v", err)
	}
}

// Without an overlay2 upper directory (Docker's containerd image store), a container created
// after Docker's disk usage was taken still has its writable layer: Docker measures that one
// container when asked.
func TestWritableLayerOfANewContainerWithoutAnUpperDir(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetContainerdImageStore(true)
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "layer", "")
	first := startedContainer(t, s, podID, podCfg, "first")
	if err := fake.SetContainerSize(first, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: first}); err != nil {
		t.Fatal(err)
	}
	late := startedContainer(t, s, podID, podCfg, "late")
	if err := fake.SetContainerSize(late, 12288); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: late})
	if err != nil {
		t.Fatal(err)
	}
	if wl := resp.Stats.WritableLayer; wl == nil || wl.UsedBytes.GetValue() != 12288 {
		t.Errorf("writable layer of a container newer than the disk usage: %v, want 12288 bytes", wl)
	}
	if n := fake.Calls("DiskUsage"); n != 1 {
		t.Errorf("%d disk usage calls, want 1 (a new container is measured alone)", n)
	}
}

// With the containerd store the container's writable snapshot, which containerd names, is
// walked like an overlay2 upper directory: bytes and inodes.
func TestWritableLayerFromTheContainerdSnapshot(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.51")
	fake.SetContainerdImageStore(true)
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	upper := t.TempDir()
	if err := os.WriteFile(filepath.Join(upper, "written"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	s.layers.upperDir = func(_ context.Context, _, ns, snapshotter, key string) (string, error) {
		keys = append(keys, ns+"/"+snapshotter+"/"+key)
		return upper, nil
	}
	podID, podCfg := runPod(t, s, "snap", "")
	id := startedContainer(t, s, podID, podCfg, "c")
	resp, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	wl := resp.Stats.WritableLayer
	if wl == nil || wl.UsedBytes.GetValue() < 64<<10 || wl.InodesUsed.GetValue() != 2 {
		t.Errorf("writable layer %v, want the snapshot's 64 KiB file and 2 inodes", wl)
	}
	if len(keys) != 1 || !strings.HasSuffix(keys[0], "/overlayfs/"+id) {
		t.Errorf("containerd asked for snapshots %q, want the container's in the overlayfs snapshotter", keys)
	}
}

// A container whose working set has reached its memory limit reports no available memory
// rather than 0 bytes of it; below the limit it reports what is left.
func TestContainerStatsAvailableMemoryBelowTheLimitOnly(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "mem", "")
	for usage, want := range map[uint64]uint64{64 << 20: 0, 48 << 20: 16 << 20} {
		id := startedContainer(t, s, podID, podCfg, fmt.Sprintf("c%d", usage))
		if err := fake.SetStats(id, container.StatsResponse{MemoryStats: container.MemoryStats{Usage: usage, Limit: 64 << 20, Stats: map[string]uint64{"inactive_file": 0}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Stats.GetMemory().GetAvailableBytes()
		if want == 0 && got != nil || want != 0 && got.GetValue() != want {
			t.Errorf("usage %d of a 64 MiB limit: available %v, want %d (0: none)", usage, got, want)
		}
	}
}

// ListPodSandboxStats of several pods reports each pod's containers, and a pod's memory usage,
// rss and page faults are the sums of its sandbox's and its containers'.
func TestListPodSandboxStatsOfSeveralPods(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	want := map[string]string{}
	for _, name := range []string{"a", "b"} {
		podID, podCfg := runPod(t, s, name, "")
		id := startedContainer(t, s, podID, podCfg, "c")
		want[podID] = id
		for cid, usage := range map[string]uint64{podID: 1 << 20, id: 8 << 20} {
			if err := fake.SetStats(cid, container.StatsResponse{MemoryStats: container.MemoryStats{Usage: usage, Limit: 1 << 30,
				Stats: map[string]uint64{"inactive_file": 0, "anon": usage / 2, "pgfault": 10, "pgmajfault": 1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(resp.Stats) != 2 {
		t.Fatalf("ListPodSandboxStats = %v, %v; want 2 pods", resp, err)
	}
	for _, st := range resp.Stats {
		id := st.Attributes.GetId()
		l := st.GetLinux()
		if len(l.GetContainers()) != 1 || l.Containers[0].GetAttributes().GetId() != want[id] {
			t.Errorf("pod %.12s: containers %v, want %.12s", id, l.GetContainers(), want[id])
		}
		if m := l.GetMemory(); m.GetUsageBytes().GetValue() != 9<<20 || m.GetRssBytes().GetValue() != 9<<19 || m.GetPageFaults().GetValue() != 20 || m.GetMajorPageFaults().GetValue() != 2 {
			t.Errorf("pod %.12s: memory %v, want the sums of the sandbox's and the container's", id, m)
		}
	}
}

// A pod's default interface is eth0 whatever other interfaces it has (a CNI with a second
// network, a tunnel sorting before it), as the kubelet's summary expects.
func TestPodsDefaultInterfaceIsEth0AmongOthers(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	podID, _ := runPod(t, s, "nets", "")
	nets := map[string]container.NetworkStats{"a0": {RxBytes: 1}, "eth0": {RxBytes: 2}, "net1": {RxBytes: 3}}
	if err := fake.SetStats(podID, container.StatsResponse{Networks: nets}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	n := resp.Stats.GetLinux().GetNetwork()
	if n.GetDefaultInterface().GetName() != "eth0" || n.GetDefaultInterface().GetRxBytes().GetValue() != 2 || len(n.GetInterfaces()) != 3 {
		t.Errorf("network %v, want eth0 the default of 3 interfaces", n)
	}
}
