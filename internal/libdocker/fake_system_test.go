package libdocker

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"
)

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
