package core

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestRecursiveReadOnlyMounts(t *testing.T) {
	data := t.TempDir() // Docker's mounts API wants the source to exist
	rro := func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{
			{HostPath: data, ContainerPath: "/data", Readonly: true, RecursiveReadOnly: true},
			{HostPath: "/etc/app", ContainerPath: "/etc/app", Readonly: true},
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

// Host-path mounts have containerd's semantics on every engine: before API 1.44 a "ro" bind
// is read-only at the top only; from 1.44 Docker would make it recursive, so read-only mounts
// go as mounts with ReadOnlyNonRecursive. SELinux relabel needs a bind only where SELinux is on.
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
		// Docker 20.10: bind specs say everything but recursive read-only.
		{api: "1.41", prop: private, want: want{bind: "/h:/c"}},
		{api: "1.41", prop: slave, want: want{bind: "/h:/c:rslave"}},
		{api: "1.41", prop: shared, want: want{bind: "/h:/c:rshared"}},
		{api: "1.41", ro: true, prop: private, want: want{bind: "/h:/c:ro"}},
		{api: "1.41", ro: true, prop: slave, want: want{bind: "/h:/c:ro,rslave"}},
		{api: "1.41", ro: true, relabel: true, prop: private, want: want{bind: "/h:/c:ro,Z"}},
		{api: "1.41", ro: true, rro: true, prop: private, want: want{code: codes.Unimplemented}},
		{api: "1.41", rro: true, prop: private, want: want{code: codes.InvalidArgument}},
		// Docker 25+: read-write stays a bind; read-only becomes a non-recursive mount.
		{api: "1.44", prop: shared, want: want{bind: "/h:/c:rshared"}},
		{api: "1.51", relabel: true, prop: private, want: want{bind: "/h:/c:Z"}},
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
