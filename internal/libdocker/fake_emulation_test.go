package libdocker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// Version names the engine of the API version the fake was set to, and a made-up one for a
// version it has no engine for.
func TestFakeVersionIsTheEngineOfItsAPIVersion(t *testing.T) {
	ctx := context.Background()
	for api, want := range map[string]string{"1.44": "25.0.5", "1.51": "28.5.2", "1.99": "0.0.0-fake"} {
		f := NewFake()
		f.SetAPIVersion(api)
		v, err := f.Version(ctx)
		if err != nil || v.Version != want || v.APIVersion != api {
			t.Errorf("API %s: Version = %s (API %s), %v; want %s", api, v.Version, v.APIVersion, err, want)
		}
	}
}

// ListImages answers as Docker's list without shared sizes: -1 for the shared size and the
// container count, the creation time in seconds and the image's labels.
func TestListImagesSummariesAreDockers(t *testing.T) {
	f := NewFake()
	img := FakeImage(busyboxID, "", "busybox")
	img.Created = "2026-11-30T10:00:00.5Z"
	img.Config.Labels = map[string]string{"org.opencontainers.image.title": "busybox"}
	f.AddImage(img)
	list, err := f.ListImages(context.Background(), image.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListImages = %v, %v", list, err)
	}
	s := list[0]
	created, _ := time.Parse(time.RFC3339, "2026-11-30T10:00:00Z")
	if s.SharedSize != -1 || s.Containers != -1 || s.Created != created.Unix() || s.Labels["org.opencontainers.image.title"] != "busybox" {
		t.Errorf("summary %+v; want shared size and containers -1, created %d, the image's labels", s, created.Unix())
	}
}

// A container's name in an error is its short ID, as in Docker's messages.
func TestRemoveImageConflictNamesShortIDs(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "")
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err := f.RemoveImage(ctx, busyboxID, image.RemoveOptions{Force: true})
	want := "unable to delete " + strings.TrimPrefix(busyboxID, "sha256:")[:12] + " (cannot be forced) - image is being used by running container " + id[:12]
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("RemoveImage = %v, want it to end %q", err, want)
	}
}

// Calls counts APIVersion as every other method.
func TestCallsCountsAPIVersion(t *testing.T) {
	f := NewFake()
	f.APIVersion()
	f.APIVersion()
	if n := f.Calls("APIVersion"); n != 2 {
		t.Errorf("Calls(APIVersion) = %d after two calls", n)
	}
}

// A container created without a network mode gets the daemon's default, "bridge" from API
// 1.44 on and "default" before; one with a network mode keeps it.
func TestCreateFillsTheDefaultNetworkMode(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ api, mode, want string }{
		{"1.41", "", "default"}, {"1.44", "", "bridge"}, {"1.44", "none", "none"}, {"1.41", "host", "host"},
	} {
		f := newTestFake(t)
		f.SetAPIVersion(tc.api)
		id, err := f.CreateContainer(ctx, "c1", &container.Config{Image: "busybox"}, &container.HostConfig{NetworkMode: container.NetworkMode(tc.mode)})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := f.InspectContainer(ctx, id)
		if got := string(c.HostConfig.NetworkMode); got != tc.want {
			t.Errorf("API %s, network mode %q: %q, want %q", tc.api, tc.mode, got, tc.want)
		}
	}
}

// A container takes the image's entrypoint, command and working directory where its config
// has none, keeps its own where it has them, and is refused without any command.
func TestCreateMergesTheImageConfig(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	img := FakeImage("", "", "app:1")
	img.Config.ImageConfig = ocispec.ImageConfig{Entrypoint: []string{"/entry"}, Cmd: []string{"serve"}, WorkingDir: "/srv"}
	f.AddImage(img)
	bare := FakeImage("", "", "bare:1")
	bare.Config.ImageConfig = ocispec.ImageConfig{}
	f.AddImage(bare)

	inherit, err := f.CreateContainer(ctx, "inherit", &container.Config{Image: "app:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := f.InspectContainer(ctx, inherit)
	if !slices.Equal(c.Config.Entrypoint, []string{"/entry"}) || !slices.Equal(c.Config.Cmd, []string{"serve"}) || c.Config.WorkingDir != "/srv" {
		t.Errorf("from the image: entrypoint %q cmd %q workdir %q", c.Config.Entrypoint, c.Config.Cmd, c.Config.WorkingDir)
	}
	own, err := f.CreateContainer(ctx, "own", &container.Config{Image: "app:1", Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "true"}, WorkingDir: "/tmp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ = f.InspectContainer(ctx, own)
	if !slices.Equal(c.Config.Entrypoint, []string{"/bin/sh"}) || !slices.Equal(c.Config.Cmd, []string{"-c", "true"}) || c.Config.WorkingDir != "/tmp" {
		t.Errorf("its own: entrypoint %q cmd %q workdir %q", c.Config.Entrypoint, c.Config.Cmd, c.Config.WorkingDir)
	}
	if _, err := f.CreateContainer(ctx, "none", &container.Config{Image: "bare:1"}, nil); !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("no command anywhere: %v, want Docker's \"No command specified\"", err)
	}
	if _, err := f.CreateContainer(ctx, "entry", &container.Config{Image: "bare:1", Entrypoint: []string{"/bin/true"}}, nil); err != nil {
		t.Errorf("an entrypoint without a command: %v", err)
	}
}

// Containers lists the oldest first, and ListContainers the newest first, as Docker does.
func TestContainersAreOldestFirst(t *testing.T) {
	f := newTestFake(t)
	var want []string
	for i := range 20 { // more than a small map holds, whose order would be the insertion's
		want = append(want, mustCreate(t, f, fmt.Sprintf("c%d", i), nil, ""))
	}
	var got []string
	for _, c := range f.Containers() {
		got = append(got, c.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Containers = %q, want %q", got, want)
	}
	list, err := f.ListContainers(context.Background(), container.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, c := range list {
		got = append(got, c.ID)
	}
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListContainers = %q, want the newest first %q", got, want)
	}
}

// An update without a cpuset keeps the container's; a memory limit equal to the memory+swap
// limit needs no new swap limit (Docker refuses only one above it).
func TestUpdateContainerKeepsWhatItDoesNotSet(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id, err := f.CreateContainer(ctx, "c1", &container.Config{Image: "busybox"}, &container.HostConfig{Resources: container.Resources{Memory: 64 << 20, MemorySwap: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{CpusetCpus: "0-1", CpusetMems: "0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.UpdateContainer(ctx, id, container.UpdateConfig{Resources: container.Resources{Memory: 128 << 20}}); err != nil {
		t.Fatalf("memory equal to memory+swap: %v", err)
	}
	c, _ := f.InspectContainer(ctx, id)
	if hc := c.HostConfig; hc.CpusetCpus != "0-1" || hc.CpusetMems != "0" || hc.Memory != 128<<20 {
		t.Errorf("after the updates: cpus %q mems %q memory %d", hc.CpusetCpus, hc.CpusetMems, hc.Memory)
	}
}

// One ContainerStats call after another is one in flight at a time.
func TestMaxConcurrentStatsOfSequentialCalls(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "")
	for range 3 {
		if _, err := f.ContainerStats(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.MaxConcurrentStats(); n != 1 {
		t.Errorf("MaxConcurrentStats = %d after sequential calls, want 1", n)
	}
}

// A stats delay longer than the caller's deadline ends the call with the deadline's error.
func TestStatsDelayEndsAtTheCallersDeadline(t *testing.T) {
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "")
	f.SetStatsDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.ContainerStats(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ContainerStats = %v, want the deadline's error", err)
	}
}

// The synthetic CPU sample is one a kernel could give: user plus kernel time within the
// total, the total within the wall time of the container's CPUs, and the system usage the
// wall time of all CPUs.
func TestStatsCPUSampleIsPlausible(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "")
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	time.Sleep(10 * time.Millisecond) // some CPU time to account for
	before := time.Now()
	st, err := f.ContainerStats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cpu := st.CPUStats
	n := uint64(cpu.OnlineCPUs)
	wall := uint64(time.Since(started).Nanoseconds())
	if u := cpu.CPUUsage; u.TotalUsage == 0 || u.UsageInUsermode+u.UsageInKernelmode > u.TotalUsage || u.TotalUsage > wall*n {
		t.Errorf("cpu usage %+v over %d ns of %d CPUs", u, wall, n)
	}
	if cpu.SystemUsage < uint64(before.UnixNano())*n {
		t.Errorf("system usage %d, want at least %d ns times %d CPUs", cpu.SystemUsage, before.UnixNano(), n)
	}
}

// The logs of a container with a TTY are its raw output; without one they are frames.
func TestContainerLogsOfATTYAreRaw(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id, err := f.CreateContainer(ctx, "tty", &container.Config{Image: "busybox", Tty: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteLog(id, false, "hello\n"); err != nil {
		t.Fatal(err)
	}
	rc, err := f.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if raw, _ := io.ReadAll(rc); string(raw) != "hello\n" {
		t.Errorf("logs of a TTY %q, want the raw output", raw)
	}
}

// BreakEvents ends the open streams with its error, or with an unexpected EOF for nil.
func TestBreakEventsEndsStreamsWithAnError(t *testing.T) {
	for _, give := range []error{nil, errors.New("connection reset by peer")} {
		f := NewFake()
		_, errs := f.Events(context.Background(), events.ListOptions{})
		f.BreakEvents(give)
		err := <-errs
		if err == nil || give != nil && err.Error() != give.Error() {
			t.Errorf("BreakEvents(%v): stream ended with %v", give, err)
		}
	}
}

// Events refuses a filter it does not emulate, as the fake's list calls do.
func TestEventsRefusesFiltersItDoesNotEmulate(t *testing.T) {
	f := NewFake()
	_, errs := f.Events(context.Background(), events.ListOptions{Filters: filters.NewArgs(filters.Arg("image", "busybox"))})
	if err := <-errs; err == nil {
		t.Error("Events with an image filter: no error")
	}
}

// Every process the fake starts, a container's or an exec'd one, has a pid of its own.
func TestPidsAreUnique(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	seen := map[int]string{}
	add := func(what string, pid int) {
		if other, ok := seen[pid]; ok || pid <= 0 {
			t.Errorf("%s has pid %d, as %s", what, pid, other)
		}
		seen[pid] = what
	}
	for _, name := range []string{"c1", "c2", "c3"} {
		id := mustCreate(t, f, name, nil, "")
		if err := f.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		c, _ := f.InspectContainer(ctx, id)
		add(name, c.State.Pid)
		execID, err := f.CreateExec(ctx, id, container.ExecOptions{Cmd: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.AttachExec(ctx, execID, container.ExecAttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp.Close()
		e, err := f.InspectExec(ctx, execID)
		if err != nil {
			t.Fatal(err)
		}
		add("an exec in "+name, e.Pid)
	}
}

// An exec's output comes out of its attach stream multiplexed, as Docker sends it without a
// TTY: stdout and stderr each in their own frames, and no frame for a stream with no output.
func TestExecOutputIsMultiplexedByStream(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := testutil.RunningContainer(t, f, "exec", &container.Config{Image: "busybox"}, nil)
	for _, want := range []ExecResult{{Stdout: "out\n", Stderr: "err\n"}, {Stdout: "only out"}, {Stderr: "only err"}, {}} {
		f.SetExecHandler(func(string, []string) ExecResult { return want })
		execID, err := f.CreateExec(ctx, id, container.ExecOptions{Cmd: []string{"x"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.AttachExec(ctx, execID, container.ExecAttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Reader)
		resp.Close()
		var stdout, stderr strings.Builder
		if _, err := stdcopy.StdCopy(&stdout, &stderr, bytes.NewReader(raw)); err != nil {
			t.Fatal(err)
		}
		frames := 0
		for rest := raw; len(rest) >= 8; frames++ {
			rest = rest[8+int(binary.BigEndian.Uint32(rest[4:8])):]
		}
		wantFrames := 0
		for _, s := range []string{want.Stdout, want.Stderr} {
			if s != "" {
				wantFrames++
			}
		}
		if stdout.String() != want.Stdout || stderr.String() != want.Stderr || frames != wantFrames {
			t.Errorf("exec output %q / %q in %d frames, want %q / %q in %d", stdout.String(), stderr.String(), frames, want.Stdout, want.Stderr, wantFrames)
		}
	}
}
