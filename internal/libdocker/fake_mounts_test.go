package libdocker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// Docker 29.8.0's answers for an image mount's sub path, as seen on this project's engine.
func TestClassifySubpathErrors(t *testing.T) {
	const root = "/var/lib/docker/rootfs/overlayfs/2dcbd4abb96f2ee33fafb89c6b8bea1e9acfbe3d707f5a5d7e8b94d26c63dbcf"
	for _, tc := range []struct {
		msg  string
		kind error
	}{
		{"cannot access path " + root + "/not-existing: lstat " + root + "/not-existing: no such file or directory", ErrSubpathNotFound},
		{`error while resolving symlinks in combined path "` + root + `/bin/sh/x": not a directory`, ErrSubpathInvalid},
		{"path concatenation escapes the base directory, base: " + root + ", subpath: x", ErrSubpathInvalid},
	} {
		err := classify(dErr(cerrdefs.ErrNotFound, "%s", tc.msg))
		if !errors.Is(err, tc.kind) || !IsNotFound(err) || err.Error() != "Error response from daemon: "+tc.msg {
			t.Errorf("classify(%q) = %v; want kind %v, still not found, same text", tc.msg, err, tc.kind)
		}
	}
	if err := classify(notFound("container", "abc")); errors.Is(err, ErrSubpathNotFound) {
		t.Errorf("a missing container classified as a sub path: %v", err)
	}
}

// An image of two layer directories: bin/sh (a file) below, etc/group above.
func layeredImage(t *testing.T, f *Fake, tag string) string {
	t.Helper()
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	for p, content := range map[string]string{filepath.Join(lower, "bin", "sh"): "#!", filepath.Join(upper, "etc", "group"): "root:x:0:\n"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := FakeImage("", "", tag)
	img.GraphDriver.Name = "overlay2"
	img.GraphDriver.Data = map[string]string{"UpperDir": upper, "LowerDir": lower}
	return f.AddImage(img)
}

// Docker 29 takes any image sub path at create; setting up the mounts (start, the archive
// API) resolves it.
func TestFakeImageMountSubpathAsDocker29(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	f.SetAPIVersion("1.56")
	f.SetDockerRootDir("/var/lib/d29")
	layeredImage(t, f, "example.com/vol:1")
	create := func(sub string) string {
		t.Helper()
		id, err := f.CreateContainer(ctx, "", &container.Config{Image: "busybox"}, &container.HostConfig{Mounts: []mount.Mount{
			{Type: mount.TypeImage, Source: "example.com/vol:1", Target: "/mnt/v", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: sub}},
		}})
		if err != nil {
			t.Fatalf("create with sub path %q: %v", sub, err)
		}
		return id
	}

	id := create("not-existing")
	c, _ := f.InspectContainer(ctx, id)
	mp := c.Mounts[0]
	if mp.Type != mount.TypeImage || mp.Name != "example.com/vol:1" || !strings.HasPrefix(mp.Source, "/var/lib/d29/rootfs/overlayfs/") || mp.Destination != "/mnt/v" || mp.RW {
		t.Errorf("inspect mount %+v", mp)
	}
	want := "cannot access path " + mp.Source + "/not-existing: lstat " + mp.Source + "/not-existing: no such file or directory"
	_, err := f.StatContainerPath(ctx, id, "/mnt/v")
	if !errors.Is(err, ErrSubpathNotFound) || !cerrdefs.IsInternal(err) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("StatContainerPath = %v; want a 500 %q", err, want)
	}
	err = f.StartContainer(ctx, id)
	if !errors.Is(err, ErrSubpathNotFound) || !IsNotFound(err) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("StartContainer = %v; want a 404 %q", err, want)
	}
	c, _ = f.InspectContainer(ctx, id)
	if c.State.Status != container.StateCreated || c.State.ExitCode != 128 || c.State.Error != want {
		t.Errorf("state after the failed start %+v", c.State)
	}

	id = create("bin/sh/x")
	if _, err := f.StatContainerPath(ctx, id, "/mnt/v"); !errors.Is(err, ErrSubpathInvalid) || !cerrdefs.IsInternal(err) {
		t.Errorf("StatContainerPath through a file = %v", err)
	}
	if err := f.StartContainer(ctx, id); !errors.Is(err, ErrSubpathInvalid) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("StartContainer through a file = %v", err)
	}

	for sub, dir := range map[string]bool{"etc": true, "bin/sh": false, "": true} {
		id = create(sub)
		st, err := f.StatContainerPath(ctx, id, "/mnt/v")
		if err != nil || st.Name != "v" || st.Mode.IsDir() != dir {
			t.Errorf("StatContainerPath with sub path %q = %+v, %v; want a directory: %v", sub, st, err, dir)
		}
		if _, err := f.StatContainerPath(ctx, id, "/mnt/other"); !IsNotFound(err) || errors.Is(err, ErrSubpathNotFound) {
			t.Errorf("StatContainerPath of a path the fake does not know = %v, want not found", err)
		}
		if err := f.StartContainer(ctx, id); err != nil {
			t.Errorf("StartContainer with sub path %q: %v", sub, err)
		}
	}
	if _, err := f.StatContainerPath(ctx, "absent", "/"); !IsNotFound(err) {
		t.Errorf("StatContainerPath of no container = %v", err)
	}

	// An image whose layers the fake does not know has every sub path.
	if _, err := f.CreateContainer(ctx, "plain", &container.Config{Image: "busybox"}, &container.HostConfig{Mounts: []mount.Mount{
		{Type: mount.TypeImage, Source: busyboxID, Target: "/mnt/b", ReadOnly: true, ImageOptions: &mount.ImageOptions{Subpath: "anything"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := f.StartContainer(ctx, "plain"); err != nil {
		t.Errorf("StartContainer of an image without layer directories: %v", err)
	}
}

// The real client: Docker answers a HEAD of the archive API without a message, so a failure is
// asked again as a GET, whose 500 carries Docker's reason.
func TestStatContainerPathGivesDockerReason(t *testing.T) {
	const reason = "cannot access path /r/not-existing: lstat /r/not-existing: no such file or directory"
	var heads, gets int
	mux := http.NewServeMux()
	mux.HandleFunc("/_ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("API-Version", "1.56")
		_, _ = w.Write([]byte("OK"))
	})
	mux.HandleFunc("/{version}/containers/{id}/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.PathValue("id") == "good" {
			stat, _ := json.Marshal(container.PathStat{Name: "v", Mode: fs.ModeDir | 0o755})
			w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
			return
		}
		if r.Method == http.MethodHead {
			heads++
		} else {
			gets++
		}
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": reason})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(Options{Endpoint: "tcp://" + srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if st, err := c.StatContainerPath(ctx, "good", "/mnt/v"); err != nil || st.Name != "v" || !st.Mode.IsDir() {
		t.Errorf("StatContainerPath = %+v, %v", st, err)
	}
	if heads+gets != 0 {
		t.Errorf("a successful stat made %d HEADs and %d GETs of the failing kind", heads, gets)
	}
	_, err = c.StatContainerPath(ctx, "bad", "/mnt/v")
	if !errors.Is(err, ErrSubpathNotFound) || !strings.Contains(err.Error(), reason) || heads != 1 || gets != 1 {
		t.Errorf("StatContainerPath = %v after %d HEADs and %d GETs; want %q from one of each", err, heads, gets, reason)
	}
}

// Binds are parsed as Docker's Linux parser does: every ':' splits, so a target that carries
// ":rshared" is options, and a relative source names a volume. Mounts are taken as they are.
func TestFakeBindsAndMountsAsDocker(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	missing := filepath.Join(src, "missing")
	create := func(api string, hc *container.HostConfig) (*container.InspectResponse, error) {
		t.Helper()
		f := newTestFake(t)
		f.SetAPIVersion(api)
		id, err := f.CreateContainer(ctx, "", &container.Config{Image: "busybox"}, hc)
		if err != nil {
			return nil, err
		}
		return f.InspectContainer(ctx, id)
	}
	bind := func(source, target string, create bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: source, Target: target, BindOptions: &mount.BindOptions{CreateMountpoint: create}}
	}

	for _, tc := range []struct {
		name string
		api  string
		hc   container.HostConfig
		want container.MountPoint // or
		code error
	}{
		{name: "bind spec options in the target", api: "1.41", hc: container.HostConfig{Binds: []string{src + ":/x:rshared"}},
			want: container.MountPoint{Type: mount.TypeBind, Source: src, Destination: "/x", Mode: "rshared", RW: true, Propagation: mount.PropagationRShared}},
		{name: "bind spec read-only relabelled", api: "1.41", hc: container.HostConfig{Binds: []string{src + ":/x:ro,Z"}},
			want: container.MountPoint{Type: mount.TypeBind, Source: src, Destination: "/x", Mode: "ro,Z", Propagation: mount.PropagationRPrivate}},
		{name: "bind spec relative source", api: "1.41", hc: container.HostConfig{Binds: []string{"data:/d"}},
			want: container.MountPoint{Type: mount.TypeVolume, Name: "data", Driver: "local", Source: "/var/lib/docker/volumes/data/_data", Destination: "/d", RW: true}},
		{name: "bind spec with four parts", api: "1.41", hc: container.HostConfig{Binds: []string{src + ":/x:rshared:Z"}}, code: cerrdefs.ErrInternal},
		{name: "bind spec with a bad mode", api: "1.41", hc: container.HostConfig{Binds: []string{src + ":/x:exec"}}, code: cerrdefs.ErrInternal},
		{name: "mount target with a colon", api: "1.41", hc: container.HostConfig{Mounts: []mount.Mount{bind(src, "/x:rshared", false)}},
			want: container.MountPoint{Type: mount.TypeBind, Source: src, Destination: "/x:rshared", RW: true, Propagation: mount.PropagationRPrivate}},
		{name: "mount relative source", api: "1.51", hc: container.HostConfig{Mounts: []mount.Mount{bind("data", "/d", true)}}, code: cerrdefs.ErrInvalidArgument},
		{name: "mount relative target", api: "1.51", hc: container.HostConfig{Mounts: []mount.Mount{bind(src, "d", true)}}, code: cerrdefs.ErrInvalidArgument},
		{name: "mount at /", api: "1.51", hc: container.HostConfig{Mounts: []mount.Mount{bind(src, "/", true)}}, code: cerrdefs.ErrInvalidArgument},
		{name: "missing source", api: "1.51", hc: container.HostConfig{Mounts: []mount.Mount{bind(missing, "/d", false)}}, code: cerrdefs.ErrInvalidArgument},
		// Docker 20.10 has no CreateMountpoint; the router drops it before API 1.42.
		{name: "missing source, create, API 1.41", api: "1.41", hc: container.HostConfig{Mounts: []mount.Mount{bind(missing, "/d", true)}}, code: cerrdefs.ErrInvalidArgument},
		{name: "missing source, create, API 1.42", api: "1.42", hc: container.HostConfig{Mounts: []mount.Mount{bind(missing, "/d", true)}},
			want: container.MountPoint{Type: mount.TypeBind, Source: missing, Destination: "/d", RW: true, Propagation: mount.PropagationRPrivate}},
		{name: "bind and mount at one target", api: "1.51", hc: container.HostConfig{Binds: []string{src + ":/d"}, Mounts: []mount.Mount{bind(src, "/d/", false)}}, code: cerrdefs.ErrInvalidArgument},
		{name: "two mounts at one target", api: "1.51", hc: container.HostConfig{Mounts: []mount.Mount{bind(src, "/d", false), bind(src, "/d", false)}}, code: cerrdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := create(tc.api, &tc.hc)
			if tc.code != nil {
				if !errors.Is(err, tc.code) {
					t.Fatalf("create = %v; want %v", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Mounts) != 1 || c.Mounts[0] != tc.want {
				t.Errorf("inspect mounts %+v; want %+v", c.Mounts, tc.want)
			}
		})
	}
}
