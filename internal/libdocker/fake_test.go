package libdocker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
)

const busyboxID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// newTestFake has busybox:latest (ID busyboxID, USER nobody) and a runtime "broken" at a path.
func newTestFake(t *testing.T) *Fake {
	t.Helper()
	f := NewFake()
	f.AddImage(FakeImage(busyboxID, "nobody", "busybox"))
	f.AddRuntime("broken", "/usr/local/bin/broken-runc")
	f.BreakRuntime("broken")
	return f
}

func mustCreate(t *testing.T, f *Fake, name string, labels map[string]string, runtime string) string {
	t.Helper()
	id, err := f.CreateContainer(context.Background(), name,
		&container.Config{Image: "busybox", Labels: labels}, &container.HostConfig{Runtime: runtime})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return id
}

func TestCreateFillsDefaultRuntime(t *testing.T) {
	for _, tc := range []struct {
		name, defaultRT, requested, want string
	}{
		{"empty gets daemon default", "", "", "runc"},
		{"empty follows changed default", "io.containerd.runc.v2", "", "io.containerd.runc.v2"},
		{"explicit kept", "", "io.containerd.runc.v2", "io.containerd.runc.v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFake(t)
			if tc.defaultRT != "" {
				f.SetDefaultRuntime(tc.defaultRT)
			}
			hc := &container.HostConfig{Runtime: tc.requested}
			id, err := f.CreateContainer(context.Background(), "c1", &container.Config{Image: "busybox"}, hc)
			if err != nil {
				t.Fatal(err)
			}
			if hc.Runtime != tc.requested {
				t.Errorf("caller's HostConfig mutated: Runtime %q", hc.Runtime)
			}
			got, err := f.InspectContainer(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if got.HostConfig.Runtime != tc.want {
				t.Errorf("Runtime = %q, want %q", got.HostConfig.Runtime, tc.want)
			}
		})
	}
}

func TestCreateUnknownRuntimeLeavesNoContainer(t *testing.T) {
	for _, tc := range []struct{ api, wantText string }{
		{"1.41", "Unknown runtime specified nope"},
		{"1.51", "unknown or invalid runtime name: nope"},
	} {
		t.Run(tc.api, func(t *testing.T) {
			f := newTestFake(t)
			f.SetAPIVersion(tc.api)
			_, err := f.CreateContainer(context.Background(), "c1", &container.Config{Image: "busybox"},
				&container.HostConfig{Runtime: "nope"})
			if !errors.Is(err, ErrUnknownRuntime) || !cerrdefs.IsInvalidArgument(err) {
				t.Fatalf("err = %v, want ErrUnknownRuntime and invalid argument", err)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("err = %q, want text %q", err, tc.wantText)
			}
			if n := len(f.Containers()); n != 0 {
				t.Errorf("%d containers left behind", n)
			}
		})
	}
}

func TestCreateValidation(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, cname, image string
		check              func(error) bool
	}{
		{"tag", "ok1", "busybox:latest", func(err error) bool { return err == nil }},
		{"fully qualified", "ok2", "docker.io/library/busybox", func(err error) bool { return err == nil }},
		{"full ID", "ok3", busyboxID, func(err error) bool { return err == nil }},
		{"ID prefix", "ok4", "111111111111", func(err error) bool { return err == nil }},
		{"missing image", "c2", "alpine", IsNotFound},
		{"missing tag", "c3", "busybox:1.36", IsNotFound},
		{"duplicate name", "taken", "busybox", IsConflict},
		{"duplicate name with slash", "/taken", "busybox", IsConflict},
		{"invalid name", "bad name", "busybox", cerrdefs.IsInvalidArgument},
		{"one-char name", "a", "busybox", cerrdefs.IsInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFake(t)
			mustCreate(t, f, "taken", nil, "")
			_, err := f.CreateContainer(ctx, tc.cname, &container.Config{Image: tc.image}, nil)
			if !tc.check(err) {
				t.Fatalf("unexpected err: %v", err)
			}
			if want := 1 + map[bool]int{true: 1}[err == nil]; len(f.Containers()) != want {
				t.Errorf("%d containers, want %d", len(f.Containers()), want)
			}
		})
	}
}

func TestCreateRecordsDockerView(t *testing.T) {
	f := newTestFake(t)
	labels := map[string]string{"io.kubernetes.pod.name": "p"}
	id := mustCreate(t, f, "c1", labels, "")
	labels["io.kubernetes.pod.name"] = "changed" // must not reach the fake
	got, err := f.InspectContainer(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 64 || got.Name != "/c1" || got.Image != busyboxID || got.Config.Image != "busybox" {
		t.Errorf("id %q name %q image %q config.image %q", id, got.Name, got.Image, got.Config.Image)
	}
	if got.Config.Labels["io.kubernetes.pod.name"] != "p" {
		t.Errorf("labels aliased the caller's map: %v", got.Config.Labels)
	}
	if got.Config.User != "nobody" {
		t.Errorf("image USER not merged: %q", got.Config.User)
	}
	if _, err := time.Parse(time.RFC3339Nano, got.Created); err != nil || got.State.Status != container.StateCreated {
		t.Errorf("Created %q (%v), status %q", got.Created, err, got.State.Status)
	}
	got.Config.Labels["x"] = "y"
	got.State.Status = container.StateDead
	again, _ := f.InspectContainer(context.Background(), id)
	if _, ok := again.Config.Labels["x"]; ok || again.State.Status != container.StateCreated {
		t.Error("InspectContainer result aliases the fake's state")
	}
}

func TestStartBrokenRuntimeFailsLikeDocker(t *testing.T) {
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "broken")
	err := f.StartContainer(context.Background(), id)
	if !errors.Is(err, ErrRuntimeFailed) {
		t.Fatalf("err = %v, want ErrRuntimeFailed", err)
	}
	for _, s := range []string{"OCI runtime create failed", "fork/exec /usr/local/bin/broken-runc: permission denied: unknown"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("err %q lacks %q", err, s)
		}
	}
	got, _ := f.InspectContainer(context.Background(), id)
	if st := got.State; st.Status != container.StateCreated || st.Running || st.ExitCode != 126 || st.Error == "" {
		t.Errorf("state after failed start = %+v, want created, exit 126, error set", *st)
	}
}

func TestStartStopLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "c1", nil, "")
	steps := []struct {
		name    string
		do      func() error
		status  container.ContainerState
		running bool
	}{
		{"stop created is a no-op", func() error { return f.StopContainer(ctx, id, 0) }, container.StateCreated, false},
		{"start by name", func() error { return f.StartContainer(ctx, "c1") }, container.StateRunning, true},
		{"start running is not an error", func() error { return f.StartContainer(ctx, id[:12]) }, container.StateRunning, true},
		{"stop", func() error { return f.StopContainer(ctx, id, time.Second) }, container.StateExited, false},
		{"stop exited is not an error", func() error { return f.StopContainer(ctx, id, 0) }, container.StateExited, false},
		{"restart exited", func() error { return f.StartContainer(ctx, id) }, container.StateRunning, true},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got, _ := f.InspectContainer(ctx, id)
		if got.State.Status != s.status || got.State.Running != s.running || (got.State.Pid != 0) != s.running {
			t.Fatalf("%s: state %+v", s.name, *got.State)
		}
	}
	if err := f.StartContainer(ctx, "nope"); !IsNotFound(err) {
		t.Errorf("start unknown: %v", err)
	}
	if err := f.StopContainer(ctx, "nope", 0); !IsNotFound(err) {
		t.Errorf("stop unknown: %v", err)
	}
}

func TestStopExitCodes(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	a, b := mustCreate(t, f, "a1", nil, ""), mustCreate(t, f, "b1", nil, "")
	for _, id := range []string{a, b} {
		if err := f.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetStopExitCode(a, 137); err != nil {
		t.Fatal(err)
	}
	if err := f.StopContainer(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.ExitContainer(b, 2); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{a: 137, b: 2} {
		got, _ := f.InspectContainer(ctx, id)
		if got.State.ExitCode != want || got.State.FinishedAt == zeroTime {
			t.Errorf("%s: exit %d finished %q, want %d", id[:6], got.State.ExitCode, got.State.FinishedAt, want)
		}
	}
}

func TestRemoveContainer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		start   bool
		ref     string
		force   bool
		check   func(error) bool
		removed bool
	}{
		{"created", false, "c1", false, func(err error) bool { return err == nil }, true},
		{"running without force conflicts", true, "c1", false, IsConflict, false},
		{"running with force", true, "c1", true, func(err error) bool { return err == nil }, true},
		{"unknown", false, "nope", false, IsNotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFake(t)
			mustCreate(t, f, "c1", nil, "")
			if tc.start {
				if err := f.StartContainer(ctx, "c1"); err != nil {
					t.Fatal(err)
				}
			}
			err := f.RemoveContainer(ctx, tc.ref, container.RemoveOptions{Force: tc.force})
			if !tc.check(err) {
				t.Fatalf("unexpected err: %v", err)
			}
			if gone := len(f.Containers()) == 0; gone != tc.removed {
				t.Errorf("removed = %v, want %v", gone, tc.removed)
			}
		})
	}
}

func TestListContainersFilters(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	sb := mustCreate(t, f, "k8s_POD_web", map[string]string{"io.kubernetes.docker.type": "podsandbox", "pod": "web"}, "")
	ctr := mustCreate(t, f, "k8s_app_web", map[string]string{"io.kubernetes.docker.type": "container", "pod": "web"}, "")
	other := mustCreate(t, f, "other", map[string]string{"pod": "db"}, "")
	for _, id := range []string{sb, ctr} {
		if err := f.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.StopContainer(ctx, ctr, 0); err != nil {
		t.Fatal(err)
	}
	args := func(kv ...string) filters.Args {
		a := filters.NewArgs()
		for i := 0; i < len(kv); i += 2 {
			a.Add(kv[i], kv[i+1])
		}
		return a
	}
	for _, tc := range []struct {
		name string
		opts container.ListOptions
		want []string
	}{
		{"running only by default", container.ListOptions{}, []string{sb}},
		{"all, newest first", container.ListOptions{All: true}, []string{other, ctr, sb}},
		{"label key", container.ListOptions{All: true, Filters: args("label", "io.kubernetes.docker.type")}, []string{ctr, sb}},
		{"labels all match", container.ListOptions{All: true, Filters: LabelFilter("pod=web", "io.kubernetes.docker.type=container")}, []string{ctr}},
		{"label value mismatch", container.ListOptions{All: true, Filters: args("label", "pod=nope")}, nil},
		{"id prefix", container.ListOptions{All: true, Filters: args("id", other[:10])}, []string{other}},
		{"name substring", container.ListOptions{All: true, Filters: args("name", "_web")}, []string{ctr, sb}},
		{"status implies all", container.ListOptions{Filters: args("status", "exited")}, []string{ctr}},
		{"status created", container.ListOptions{Filters: args("status", "created")}, []string{other}},
		{"exited needs All", container.ListOptions{Filters: args("exited", "0")}, nil},
		{"exited code", container.ListOptions{All: true, Filters: args("exited", "0")}, []string{ctr}},
		{"limit", container.ListOptions{Limit: 1}, []string{other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := f.ListContainers(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range list {
				got = append(got, s.ID)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %d %v, want %d", len(got), got, len(tc.want))
			}
		})
	}
	list, _ := f.ListContainers(ctx, container.ListOptions{Filters: args("id", sb)})
	if s := list[0]; s.Names[0] != "/k8s_POD_web" || s.ImageID != busyboxID || s.Image != "busybox" ||
		s.State != container.StateRunning || !strings.HasPrefix(s.Status, "Up ") || s.Created == 0 || s.Labels["pod"] != "web" {
		t.Errorf("summary = %+v", s)
	}
	for _, bad := range []filters.Args{args("ancestor", "busybox"), args("status", "sleeping")} {
		if _, err := f.ListContainers(ctx, container.ListOptions{Filters: bad}); !cerrdefs.IsInvalidArgument(err) {
			t.Errorf("filter %v: err = %v, want invalid argument", bad, err)
		}
	}
}

func TestInspectImage(t *testing.T) {
	f := newTestFake(t)
	for _, ref := range []string{"busybox", "busybox:latest", "docker.io/library/busybox:latest", busyboxID, "1111111111"} {
		img, err := f.InspectImage(context.Background(), ref)
		if err != nil || img.ID != busyboxID || img.Config.User != "nobody" {
			t.Errorf("%s: %v %+v", ref, err, img)
		}
	}
	for _, ref := range []string{"busybox:2", "alpine", "sha256:2222222222222222222222222222222222222222222222222222222222222222"} {
		if _, err := f.InspectImage(context.Background(), ref); !IsNotFound(err) {
			t.Errorf("%s: err = %v, want not found", ref, err)
		}
	}
}

func TestRemoveImage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		tags      []string
		container string // "", "running", "stopped"
		ref       string
		force     bool
		check     func(error) bool
		imageLeft bool
	}{
		{"untag one of two keeps image", []string{"busybox", "mybox:1"}, "", "mybox:1", false, nil, true},
		{"untag last tag removes image", []string{"busybox"}, "", "busybox", false, nil, false},
		{"by ID with one tag removes image", []string{"busybox"}, "", busyboxID, false, nil, false},
		{"by ID with two tags conflicts", []string{"busybox", "mybox:1"}, "", busyboxID, false, IsConflict, true},
		{"by ID with two tags forced", []string{"busybox", "mybox:1"}, "", busyboxID, true, nil, false},
		{"by ID used by stopped container", []string{"busybox"}, "stopped", busyboxID, false, IsConflict, true},
		{"by ID used by stopped container forced", []string{"busybox"}, "stopped", busyboxID, true, nil, false},
		{"by ID used by running container even forced", []string{"busybox"}, "running", busyboxID, true, IsConflict, true},
		{"last tag in use must force", []string{"busybox"}, "stopped", "busybox", false, IsConflict, true},
		{"unknown", []string{"busybox"}, "", "alpine", false, IsNotFound, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			f.AddImage(FakeImage(busyboxID, "", tc.tags...))
			if tc.container != "" {
				mustCreate(t, f, "c1", nil, "")
				if tc.container == "running" {
					_ = f.StartContainer(ctx, "c1")
				}
			}
			_, err := f.RemoveImage(ctx, tc.ref, image.RemoveOptions{Force: tc.force})
			if tc.check == nil && err != nil || tc.check != nil && !tc.check(err) {
				t.Fatalf("unexpected err: %v", err)
			}
			f.mu.Lock()
			_, left := f.images[busyboxID]
			f.mu.Unlock()
			if left != tc.imageLeft {
				t.Errorf("image left = %v, want %v", left, tc.imageLeft)
			}
		})
	}
}

func TestPullImage(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.AddPullable("registry.k8s.io/pause:3.9", FakeImage("", "", "ignored"))
	auth := registry.AuthConfig{Username: "u", Password: "p"}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, time.Minute); err != nil {
		t.Fatal(err)
	}
	if f.LastPullAuth() != auth {
		t.Errorf("auth not recorded: %+v", f.LastPullAuth())
	}
	img, err := f.InspectImage(ctx, "registry.k8s.io/pause:3.9")
	if err != nil || len(img.RepoTags) != 1 || img.RepoTags[0] != "registry.k8s.io/pause:3.9" {
		t.Fatalf("pulled image: %v %+v", err, img)
	}
	// A registry's manifest digest, recorded under the repository, the same at every pull.
	if len(img.RepoDigests) != 1 || !strings.HasPrefix(img.RepoDigests[0], "registry.k8s.io/pause@sha256:") {
		t.Errorf("pulled image's RepoDigests %v, want one registry.k8s.io/pause@sha256:...", img.RepoDigests)
	}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, 0); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.InspectImage(ctx, "registry.k8s.io/pause:3.9"); again.ID != img.ID || !slices.Equal(again.RepoDigests, img.RepoDigests) {
		t.Errorf("pulled again: %s %v, want %s %v", again.ID, again.RepoDigests, img.ID, img.RepoDigests)
	}
	imported, _ := f.InspectImage(ctx, f.AddImage(FakeImage("", "", "local/built:1")))
	if len(imported.RepoDigests) != 0 {
		t.Errorf("an image never pulled has RepoDigests %v", imported.RepoDigests)
	}
	for _, tc := range []struct{ ref, text string }{
		{"registry.k8s.io/pause:9.9", "manifest unknown"},
		{"nosuch/image", "pull access denied"},
	} {
		if err := f.PullImage(ctx, tc.ref, registry.AuthConfig{}, 0); !IsNotFound(err) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: err = %v", tc.ref, err)
		}
	}

	f.SetPullDelay(time.Hour)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := f.PullImage(cctx, "registry.k8s.io/pause:3.9", auth, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled pull: %v", err)
	}
	if err := f.PullImage(ctx, "registry.k8s.io/pause:3.9", auth, 10*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "no pull progress") {
		t.Errorf("stalled pull: %v", err)
	}
}

func TestInjectError(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	f.InjectError("Ping", errors.New("boom"))
	if err := f.Ping(ctx); err == nil {
		t.Fatal("injected error not returned")
	}
	if err := f.Ping(ctx); err != nil {
		t.Fatalf("one-shot error used twice: %v", err)
	}
	f.InjectPersistentError("StartContainer", errors.New("failed to create shim task: OCI runtime create failed: x"))
	for range 2 {
		if err := f.StartContainer(ctx, "whatever"); !errors.Is(err, ErrRuntimeFailed) {
			t.Fatalf("persistent error not classified: %v", err)
		}
	}
	f.InjectPersistentError("StartContainer", nil)
	if err := f.StartContainer(ctx, "whatever"); !IsNotFound(err) {
		t.Fatalf("cleared error: %v", err)
	}
	if got := f.Calls("StartContainer"); got != 3 {
		t.Errorf("Calls = %d, want 3", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("misspelt method name accepted")
		}
	}()
	f.InjectError("StartContainers", errors.New("x"))
}

func TestInfoVersionAndCounting(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if v := f.APIVersion(); v == "1.41" {
		t.Error("APIVersion negotiated before any call")
	}
	info, err := f.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.DefaultRuntime != "runc" || info.CgroupDriver != "cgroupfs" || info.DockerRootDir != "/var/lib/docker" ||
		len(info.Runtimes) != 2 || len(info.SecurityOptions) == 0 {
		t.Errorf("info = %+v", info)
	}
	v, _ := f.Version(ctx)
	if v.APIVersion != "1.41" || f.APIVersion() != "1.41" || f.InfoCalls() != 1 {
		t.Errorf("version %q, negotiated %q, info calls %d", v.APIVersion, f.APIVersion(), f.InfoCalls())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Info(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Info: %v", err)
	}
}

func TestDiskUsage(t *testing.T) {
	f := newTestFake(t)
	mustCreate(t, f, "c1", nil, "")
	du, err := f.DiskUsage(context.Background(), types.DiskUsageOptions{Types: []types.DiskUsageObject{types.ImageObject}})
	if err != nil || len(du.Images) != 1 || du.Images[0].Size != 5<<20 || du.Images[0].Containers != 1 || du.Containers != nil {
		t.Errorf("du = %+v, %v", du, err)
	}
}

// TestConcurrentUse is meant for -race: the fake is shared by concurrent CRI calls.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := "c" + string(rune('a'+i)) + "x"
			id, err := f.CreateContainer(ctx, name, &container.Config{Image: "busybox"}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			_ = f.StartContainer(ctx, id)
			_, _ = f.ListContainers(ctx, container.ListOptions{All: true})
			_ = f.RemoveContainer(ctx, id, container.RemoveOptions{Force: true})
		})
	}
	wg.Wait()
	if n := len(f.Containers()); n != 0 || f.Calls("CreateContainer") != 8 {
		t.Errorf("containers %d, creates %d", n, f.Calls("CreateContainer"))
	}
}

// What the fake does differently per Engine API version, as the daemons do: annotations from
// 1.43, the cdi device driver from 1.44, shim names from 1.42.
func TestFakeEmulatesEachEngineVersion(t *testing.T) {
	for _, tc := range []struct {
		api                        string
		annotations, cdi, shimName bool
	}{
		{"1.41", false, false, false},
		{"1.42", false, false, true},
		{"1.43", true, false, true},
		{"1.44", true, true, true},
		{"1.51", true, true, true},
	} {
		f := NewFake()
		f.SetAPIVersion(tc.api)
		f.AddImage(FakeImage("", "", "busybox:1"))
		ctx := context.Background()
		id, err := f.CreateContainer(ctx, "a-"+tc.api, &container.Config{Image: "busybox:1"}, &container.HostConfig{Annotations: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := f.InspectContainer(ctx, id)
		if got := c.HostConfig.Annotations["k"] == "v"; got != tc.annotations {
			t.Errorf("API %s: annotations kept %v, want %v", tc.api, got, tc.annotations)
		}
		_, err = f.CreateContainer(ctx, "c-"+tc.api, &container.Config{Image: "busybox:1"}, &container.HostConfig{Resources: container.Resources{DeviceRequests: []container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"vendor.com/gpu=0"}}}}})
		if got := err == nil; got != tc.cdi {
			t.Errorf("API %s: cdi device request accepted %v (%v), want %v", tc.api, got, err, tc.cdi)
		}
		_, err = f.CreateContainer(ctx, "s-"+tc.api, &container.Config{Image: "busybox:1"}, &container.HostConfig{Runtime: "io.containerd.spin.v2"})
		if got := err == nil; got != tc.shimName {
			t.Errorf("API %s: shim name accepted %v (%v), want %v", tc.api, got, err, tc.shimName)
		}
	}
}

func TestRestartingContainerIsRunningAndRestartingUntilStopped(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "restarts", nil, "")
	if err := f.RestartingContainer(id, 1); err == nil {
		t.Error("a created container was made restarting")
	}
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.RestartingContainer(id, 1); err != nil {
		t.Fatal(err)
	}
	list, err := f.ListContainers(ctx, container.ListOptions{All: true})
	if err != nil || len(list) != 1 || list[0].State != "restarting" {
		t.Fatalf("listed %+v, %v; want one restarting container", list, err)
	}
	if err := f.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	c, _ := f.InspectContainer(ctx, id)
	if c.State.Running || c.State.Restarting || c.State.Status != "exited" {
		t.Errorf("after stop: %+v", c.State)
	}
}
