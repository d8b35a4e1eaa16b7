package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// The kubelet names a pod's cgroup by its whole path under either driver. Docker's systemd
// driver takes the slice's name (runc refuses a path: "invalid slice name"), its cgroupfs
// driver the path; the sandbox and every container of the pod get the same.
func TestCgroupParentAsDockersDriverTakesIt(t *testing.T) {
	const slice = "kubepods-besteffort-pod0f1e_2d3c.slice"
	for _, tc := range []struct {
		driver, parent, want string
		code                 codes.Code
	}{
		{"systemd", "/kubepods.slice/kubepods-besteffort.slice/" + slice, slice, codes.OK},
		{"systemd", slice, slice, codes.OK},
		{"systemd", "/kubepods/besteffort/pod0f1e_2d3c", "", codes.FailedPrecondition},
		{"systemd", "/kubepods.slice/" + slice, "", codes.InvalidArgument},
		{"cgroupfs", "/kubepods/besteffort/pod0f1e_2d3c", "/kubepods/besteffort/pod0f1e_2d3c", codes.OK},
		{"cgroupfs", "/kubepods.slice/kubepods-besteffort.slice/" + slice, "/kubepods.slice/kubepods-besteffort.slice/" + slice, codes.OK},
	} {
		t.Run(tc.driver+" "+tc.parent, func(t *testing.T) {
			fake := libdocker.NewFake()
			fake.SetCgroupDriver(tc.driver)
			s := newTestService(t, fake, Options{})
			t.Cleanup(s.Close)
			ctx := context.Background()
			cfg := sandboxConfig("cg")
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: tc.parent}
			resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if status.Code(err) != tc.code {
				t.Fatalf("RunPodSandbox: %v, want %v", err, tc.code)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.parent) {
					t.Errorf("the error does not name the cgroup_parent: %v", err)
				}
				if n := len(fake.Containers()); n != 0 {
					t.Errorf("%d containers left", n)
				}
				return
			}
			id := startedContainer(t, s, resp.PodSandboxId, cfg, "c")
			for _, c := range []string{resp.PodSandboxId, id} {
				inspect, err := fake.InspectContainer(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if inspect.HostConfig.CgroupParent != tc.want || !inspect.State.Running {
					t.Errorf("%s: cgroup parent %q, running %v; want %q, running", c[:12], inspect.HostConfig.CgroupParent, inspect.State.Running, tc.want)
				}
			}
		})
	}
}

func TestSlicePath(t *testing.T) {
	for slice, want := range map[string]string{
		"kubepods.slice":                 "/kubepods.slice",
		"kubepods-besteffort-podx.slice": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice",
		"-.slice":                        "/",
		"system-getty.slice":             "/system.slice/system-getty.slice",
	} {
		if got := slicePath(slice); got != want {
			t.Errorf("slicePath(%q) = %q, want %q", slice, got, want)
		}
	}
}
