package core

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
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
	if !slices.Equal(c.HostConfig.Binds, []string{"/etc/app:/etc/app:ro"}) {
		t.Errorf("Binds %q, want only the plain read-only mount", c.HostConfig.Binds)
	}
	if len(c.HostConfig.Mounts) != 1 {
		t.Fatalf("Mounts %+v, want the recursive read-only one", c.HostConfig.Mounts)
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
	} {
		if got := kernelAtLeast(release, 5, 12); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 12) = %v, want %v", release, got, want)
		}
	}
}
