package libdocker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

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
