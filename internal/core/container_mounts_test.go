package core

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestRecursiveReadOnlyMounts(t *testing.T) {
	data, app := t.TempDir(), t.TempDir()
	rro := func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{
			{HostPath: data, ContainerPath: "/data", Readonly: true, RecursiveReadOnly: true},
			{HostPath: app, ContainerPath: "/etc/app", Readonly: true},
		}
	}

	// Docker 20.10 (API 1.41) cannot: refused, and not reported.
	old := libdocker.NewFake()
	s := newTestService(t, old, Options{})
	_, err := createWith(t, s, old, rro)
	wantCode(t, err, codes.Unimplemented)
	st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if h.Features.GetRecursiveReadOnlyMounts() {
			t.Errorf("handler %q reports recursive read-only mounts on API 1.41", h.Name)
		}
	}

	// Docker 25 (API 1.44) with runc: a bind that is read-only all the way down.
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.44")
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s = newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"vm": "kata", "plain": "runc"}})
	c, err := createWith(t, s, fake, rro)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HostConfig.Binds) != 0 {
		t.Errorf("Binds %q: API 1.44 makes a read-only bind recursive, want mounts only", c.HostConfig.Binds)
	}
	if len(c.HostConfig.Mounts) != 2 {
		t.Fatalf("Mounts %+v, want the recursive and the non-recursive read-only ones", c.HostConfig.Mounts)
	}
	m := c.HostConfig.Mounts[0]
	if m.Source != data || m.Target != "/data" || !m.ReadOnly || m.BindOptions == nil || !m.BindOptions.ReadOnlyForceRecursive {
		t.Errorf("mount %+v (bind options %+v), want a recursively read-only bind", m, m.BindOptions)
	}
	st, err = s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"": true, "docker": true, "runc": true, "plain": true, "kata": false, "vm": false}
	for _, h := range st.RuntimeHandlers {
		if w, ok := want[h.Name]; ok && h.Features.GetRecursiveReadOnlyMounts() != w {
			t.Errorf("handler %q: recursive read-only %v, want %v", h.Name, h.Features.GetRecursiveReadOnlyMounts(), w)
		}
	}

	before := fake.Calls("CreateContainer")
	for name, tc := range map[string]struct {
		mount *runtimeapi.Mount
		code  codes.Code
	}{
		"not read-only": {&runtimeapi.Mount{HostPath: "/x", ContainerPath: "/x", RecursiveReadOnly: true}, codes.InvalidArgument},
		"rslave":        {&runtimeapi.Mount{HostPath: "/x", ContainerPath: "/x", Readonly: true, RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}, codes.InvalidArgument},
		"idmapped":      {&runtimeapi.Mount{HostPath: "/x", ContainerPath: "/x", UidMappings: []*runtimeapi.IDMapping{{HostId: 1000, ContainerId: 0, Length: 1}}}, codes.Unimplemented},
	} {
		_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) { cfg.Mounts = []*runtimeapi.Mount{tc.mount} })
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", name, err, tc.code)
		}
	}
	// createWith runs a pod for each: its sandbox is the only container created.
	if n := fake.Calls("CreateContainer") - before; n != 3 {
		t.Errorf("refused mounts: %d Docker creates for 3 pods, want only their sandboxes", n)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"6.1.0-18-amd64": true, "5.12.0": true, "5.10.0-28-cloud-amd64": false, "4.19.0": false, "5.15+": true, "garbage": false,
		// A minor ending in 0 or 9 is read whole.
		"5.20.0": true, "5.19.0-rc1": true, "4.20": false,
	} {
		if got := kernelAtLeast(release, 5, 12); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 12) = %v, want %v", release, got, want)
		}
	}
}

// Host-path mounts have containerd's semantics on every engine: before API 1.44 a read-only
// mount is read-only at the top only; from 1.44 Docker would make it recursive, so read-only
// mounts say ReadOnlyNonRecursive. SELinux relabel needs a bind spec, only where SELinux is on.
func TestHostMountsMatchContainerdOnEveryEngine(t *testing.T) {
	const (
		private = runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		slave   = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		shared  = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	)
	type want struct {
		bind  string       // the Docker bind, or
		mount *mount.Mount // the Docker mount
		code  codes.Code   // or the refusal
	}
	m := func(ro bool, prop mount.Propagation, nonRec, forceRec bool) *mount.Mount {
		return &mount.Mount{Type: mount.TypeBind, Source: "/h", Target: "/c", ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: prop, ReadOnlyNonRecursive: nonRec, ReadOnlyForceRecursive: forceRec, CreateMountpoint: true}}
	}
	for _, tc := range []struct {
		api     string
		selinux bool
		ro, rro bool
		relabel bool
		prop    runtimeapi.MountPropagation
		want    want
	}{
		// Docker 20.10: a read-only mount is read-only at the top only.
		{api: "1.41", prop: private, want: want{mount: m(false, mount.PropagationRPrivate, false, false)}},
		{api: "1.41", prop: slave, want: want{mount: m(false, mount.PropagationRSlave, false, false)}},
		{api: "1.41", prop: shared, want: want{mount: m(false, mount.PropagationRShared, false, false)}},
		{api: "1.41", ro: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, false, false)}},
		{api: "1.41", ro: true, prop: slave, want: want{mount: m(true, mount.PropagationRSlave, false, false)}},
		{api: "1.41", ro: true, relabel: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, false, false)}},
		{api: "1.41", selinux: true, ro: true, relabel: true, prop: private, want: want{bind: "/h:/c:ro,Z"}},
		{api: "1.41", selinux: true, relabel: true, prop: shared, want: want{bind: "/h:/c:rshared,Z"}},
		{api: "1.41", ro: true, rro: true, prop: private, want: want{code: codes.Unimplemented}},
		{api: "1.41", rro: true, prop: private, want: want{code: codes.InvalidArgument}},
		// Docker 25+: read-only says non-recursive, or Docker would make it recursive.
		{api: "1.44", prop: shared, want: want{mount: m(false, mount.PropagationRShared, false, false)}},
		{api: "1.51", relabel: true, prop: private, want: want{mount: m(false, mount.PropagationRPrivate, false, false)}},
		{api: "1.51", selinux: true, relabel: true, prop: private, want: want{bind: "/h:/c:Z"}},
		{api: "1.51", selinux: true, ro: true, relabel: true, prop: slave, want: want{bind: "/h:/c:ro,rslave,Z"}},
		{api: "1.44", ro: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, true, false)}},
		{api: "1.51", ro: true, prop: slave, want: want{mount: m(true, mount.PropagationRSlave, true, false)}},
		{api: "1.51", ro: true, prop: shared, want: want{mount: m(true, mount.PropagationRShared, true, false)}},
		{api: "1.51", ro: true, relabel: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, true, false)}},
		{api: "1.51", selinux: true, ro: true, relabel: true, prop: private, want: want{bind: "/h:/c:ro,Z"}},
		{api: "1.51", ro: true, rro: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, false, true)}},
		{api: "1.51", ro: true, rro: true, relabel: true, prop: private, want: want{mount: m(true, mount.PropagationRPrivate, false, true)}},
		{api: "1.51", selinux: true, ro: true, rro: true, relabel: true, prop: private, want: want{code: codes.Unimplemented}},
		{api: "1.51", ro: true, rro: true, prop: slave, want: want{code: codes.InvalidArgument}},
		{api: "1.51", rro: true, prop: private, want: want{code: codes.InvalidArgument}},
	} {
		name := fmt.Sprintf("api %s selinux=%v ro=%v rro=%v relabel=%v %s", tc.api, tc.selinux, tc.ro, tc.rro, tc.relabel, tc.prop)
		fake := libdocker.NewFake()
		fake.SetAPIVersion(tc.api)
		if tc.selinux {
			fake.SetSecurityOptions("name=seccomp,profile=builtin", "name=selinux")
		}
		s := newTestService(t, fake, Options{})
		binds, mounts, err := s.hostMounts(context.Background(), []*runtimeapi.Mount{{HostPath: "/h", ContainerPath: "/c", Readonly: tc.ro, RecursiveReadOnly: tc.rro, SelinuxRelabel: tc.relabel, Propagation: tc.prop}})
		switch {
		case tc.want.code != codes.OK:
			if status.Code(err) != tc.want.code {
				t.Errorf("%s: %v, want %v", name, err, tc.want.code)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want.bind != "":
			if len(binds) != 1 || binds[0] != tc.want.bind || len(mounts) != 0 {
				t.Errorf("%s: binds %q mounts %+v, want bind %q", name, binds, mounts, tc.want.bind)
			}
		default:
			if len(binds) != 0 || len(mounts) != 1 || !reflect.DeepEqual(mounts[0], *tc.want.mount) {
				t.Errorf("%s: binds %q mounts %+v, want mount %+v (%+v)", name, binds, mounts, *tc.want.mount, tc.want.mount.BindOptions)
			}
		}
	}
}

// Docker's binds cannot take noexec, nodev or nosuid: refused, naming the option, before any
// create, and Status says the runtime does not do mount options.
func TestMountOptionsRefused(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	before := fake.Calls("CreateContainer")
	_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data", MountOptions: []string{"noexec", "nosuid"}}}
	})
	wantCode(t, err, codes.InvalidArgument)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"noexec"`) || !strings.Contains(msg, "/data") {
		t.Errorf("message %q: want the option and the mount named", msg)
	}
	if n := fake.Calls("CreateContainer") - before; n != 1 {
		t.Errorf("%d Docker creates, want only the pod's sandbox", n)
	}
	st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Features == nil || st.Features.MountOptions {
		t.Errorf("features %v: want mount_options false", st.Features)
	}
}

// Docker 25+ reports each runtime's OCI features: recursive read-only support is what they
// say ("rro" among the mount options), and runc's name decides only where there are none.
func TestRecursiveReadOnlyFromRuntimeFeatures(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.44")
	features := func(options ...string) map[string]string {
		raw, _ := json.Marshal(map[string]any{"ociVersionMin": "1.0.0", "mountOptions": options})
		return map[string]string{"org.opencontainers.runtime-spec.features": string(raw)}
	}
	fake.AddRuntime("crun", "/usr/bin/crun")
	fake.SetRuntimeStatus("crun", features("bind", "ro", "rro", "rbind"))
	fake.AddRuntime("old-runc", "/usr/local/bin/runc-1.1")
	fake.SetRuntimeStatus("old-runc", features("bind", "ro", "rbind"))
	fake.AddRuntime("runc", "runc")
	fake.SetRuntimeStatus("runc", features("bind", "ro", "rbind")) // a runc older than 1.1's rro
	fake.AddRuntime("garbled", "/usr/bin/garbled")
	fake.SetRuntimeStatus("garbled", map[string]string{"org.opencontainers.runtime-spec.features": "{not json"})
	fake.AddRuntime("io.containerd.runc.v2", "runc")
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"fast": "crun"}})
	st, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"crun": true, "fast": true, // its features say rro
		"old-runc": false, "runc": false, // features without rro, whatever the name
		"io.containerd.runc.v2": true,  // no features: runc by name
		"kata":                  false, // no features, not runc
		"garbled":               false, // unreadable features: the name rule
	}
	seen := 0
	for _, h := range st.RuntimeHandlers {
		if w, ok := want[h.Name]; ok {
			seen++
			if got := h.Features.GetRecursiveReadOnlyMounts(); got != w {
				t.Errorf("handler %q: recursive read-only %v, want %v", h.Name, got, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d handlers listed: %v", seen, len(want), st.RuntimeHandlers)
	}
}

// No part of a path is ever read as mount options: a container_path of "/x:rshared" or "/x:Z"
// is a mount at exactly that path, private, with no relabel (a bind spec would have made it a
// bidirectional mount at /x in an unprivileged pod, or relabelled the host directory). Where
// SELinux relabel needs a bind spec, a path with ':' is refused, naming its field.
func TestMountPathsAreNeverMountOptions(t *testing.T) {
	for _, api := range []string{"1.41", "1.51"} {
		for _, target := range []string{"/x:rshared", "/x:Z", "/x:ro,rshared"} {
			for _, relabel := range []bool{false, true} { // SELinux is off: relabel is a no-op
				fake := libdocker.NewFake()
				fake.SetAPIVersion(api)
				s := newTestService(t, fake, Options{})
				src := t.TempDir()
				what := fmt.Sprintf("API %s, container_path %q, relabel=%v", api, target, relabel)
				c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
					cfg.Mounts = []*runtimeapi.Mount{{HostPath: src, ContainerPath: target, SelinuxRelabel: relabel}}
				})
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				if len(c.HostConfig.Binds) != 0 || len(c.HostConfig.Mounts) != 1 {
					t.Errorf("%s: binds %q mounts %+v, want one mount", what, c.HostConfig.Binds, c.HostConfig.Mounts)
					continue
				}
				m := c.HostConfig.Mounts[0]
				if m.Type != mount.TypeBind || m.Source != src || m.Target != target || m.ReadOnly || m.BindOptions == nil || m.BindOptions.Propagation != mount.PropagationRPrivate {
					t.Errorf("%s: mount %+v (%+v), want a private read-write bind at exactly that path", what, m, m.BindOptions)
				}
				if len(c.Mounts) != 1 || c.Mounts[0].Destination != target || c.Mounts[0].Propagation != mount.PropagationRPrivate || !c.Mounts[0].RW {
					t.Errorf("%s: Docker mounted %+v", what, c.Mounts)
				}
			}
		}
	}

	// SELinux on: relabel needs a bind spec, which cannot hold a ':' in either path.
	fake := libdocker.NewFake()
	fake.SetAPIVersion("1.51")
	fake.SetSecurityOptions("name=seccomp,profile=builtin", "name=selinux")
	s := newTestService(t, fake, Options{})
	colon := filepath.Join(t.TempDir(), "a:b")
	if err := os.Mkdir(colon, 0o755); err != nil {
		t.Fatal(err)
	}
	before := fake.Calls("CreateContainer")
	for _, tc := range []struct {
		mount *runtimeapi.Mount
		field string
	}{
		{&runtimeapi.Mount{HostPath: t.TempDir(), ContainerPath: "/x:rshared", SelinuxRelabel: true}, "container_path"},
		{&runtimeapi.Mount{HostPath: t.TempDir(), ContainerPath: "/x:Z", SelinuxRelabel: true, Readonly: true}, "container_path"},
		{&runtimeapi.Mount{HostPath: colon, ContainerPath: "/x", SelinuxRelabel: true}, "host_path"},
	} {
		_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) { cfg.Mounts = []*runtimeapi.Mount{tc.mount} })
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("relabel of %q -> %q with SELinux on: %v, want InvalidArgument naming %s", tc.mount.HostPath, tc.mount.ContainerPath, err, tc.field)
		}
	}
	if n := fake.Calls("CreateContainer") - before; n != 3 {
		t.Errorf("%d Docker creates for 3 pods, want only their sandboxes", n)
	}
	// Without relabel the same paths are mounts, SELinux or not.
	c, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: colon, ContainerPath: "/x:rshared"}}
	})
	if err != nil || len(c.HostConfig.Binds) != 0 || len(c.HostConfig.Mounts) != 1 || c.HostConfig.Mounts[0].Target != "/x:rshared" {
		t.Errorf("no relabel, SELinux on: %v, %+v", err, c)
	}
	// And relabel of plain paths still goes as a bind spec with Z.
	plain := t.TempDir()
	c, err = createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: plain, ContainerPath: "/data", SelinuxRelabel: true}}
	})
	if err != nil || !slices.Equal(c.HostConfig.Binds, []string{plain + ":/data:Z"}) || len(c.HostConfig.Mounts) != 0 {
		t.Errorf("relabel with SELinux on: %v, binds %q mounts %+v", err, c.HostConfig.Binds, c.HostConfig.Mounts)
	}
}

// A relative host_path would be a Docker named volume: refused, before any create.
func TestRelativeHostPathIsRefused(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for _, host := range []string{"data", "./data", "../etc"} {
		before := fake.Calls("CreateContainer")
		_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
			cfg.Mounts = []*runtimeapi.Mount{{HostPath: host, ContainerPath: "/data"}}
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "host_path") {
			t.Errorf("host_path %q: %v, want InvalidArgument naming host_path", host, err)
		}
		if n := fake.Calls("CreateContainer") - before; n != 1 {
			t.Errorf("host_path %q: %d Docker creates, want only the pod's sandbox", host, n)
		}
	}
}

// A host path that does not exist is made a directory (0755) before the create, as containerd
// does and as Docker's binds did, on every engine: Docker 20.10 has no CreateMountpoint.
func TestMissingHostPathIsCreatedAsADirectory(t *testing.T) {
	for _, api := range []string{"1.41", "1.51"} {
		for _, ro := range []bool{false, true} {
			fake := libdocker.NewFake()
			fake.SetAPIVersion(api)
			s := newTestService(t, fake, Options{})
			missing := filepath.Join(t.TempDir(), "a", "b")
			_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
				cfg.Mounts = []*runtimeapi.Mount{{HostPath: missing, ContainerPath: "/data", Readonly: ro}}
			})
			if err != nil {
				t.Errorf("API %s readonly=%v: %v", api, ro, err)
				continue
			}
			fi, err := os.Stat(missing)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
				t.Errorf("API %s readonly=%v: host path after create: %v, %v; want a directory 0755", api, ro, fi, err)
			}
		}
	}
}

// Two mounts at one container path (as Docker cleans it) are refused before Docker is asked,
// naming the path.
func TestTwoMountsAtOnePathAreRefused(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	before := fake.Calls("CreateContainer")
	_, err := createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data"}, {HostPath: t.TempDir(), ContainerPath: "/data/"}}
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), `container_path "/data"`) {
		t.Errorf("%v, want InvalidArgument naming container_path \"/data\"", err)
	}
	if n := fake.Calls("CreateContainer") - before; n != 1 {
		t.Errorf("%d Docker creates, want only the pod's sandbox", n)
	}
}
