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

	"github.com/cri-dockerd/cri-dockerd/internal/stats"
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
	if got := fake.MaxConcurrentStats(); got > stats.Concurrency || got < 2 {
		t.Errorf("%d stats calls in flight at most, want 2..%d", got, stats.Concurrency)
	}
	if n := fake.Calls("ContainerStats"); n != 20 {
		t.Errorf("%d Docker stats calls, want one per container (20)", n)
	}
	if n := fake.Calls("InspectContainer"); n != 20 {
		t.Errorf("%d inspects, want one per container, once", n)
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
	useStats(s, stats.Config{Docker: panickyStats{fake}})
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
