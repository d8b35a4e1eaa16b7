package core

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestShmSizeFromPodAnnotations(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for _, tc := range []struct {
		annotations map[string]string
		hostIPC     bool
		want        int64
	}{
		{nil, false, 0},
		{map[string]string{shmSizeAnnotation: "256Mi"}, false, 256 << 20},
		{map[string]string{shmSizeAnnotation: "4Ki"}, false, 4096}, // the smallest size taken
		{map[string]string{crioShmSizeAnnotation: "1G"}, false, 1000000000},
		{map[string]string{shmSizeAnnotation: "128Mi", crioShmSizeAnnotation: "1Gi"}, false, 128 << 20},
		{map[string]string{shmSizeAnnotation: "256Mi"}, true, 0},
	} {
		cfg := sandboxConfig("shm" + randomSuffix())
		cfg.Annotations = tc.annotations
		if tc.hostIPC {
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}}
		}
		resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatalf("%v: %v", tc.annotations, err)
		}
		c, err := fake.InspectContainer(context.Background(), resp.PodSandboxId)
		if err != nil {
			t.Fatal(err)
		}
		if c.HostConfig.ShmSize != tc.want {
			t.Errorf("%v host IPC %v: ShmSize %d, want %d", tc.annotations, tc.hostIPC, c.HostConfig.ShmSize, tc.want)
		}
	}

	before := fake.Calls("CreateContainer")
	for _, bad := range []string{"lots", "-1Mi", "0", "1"} {
		cfg := sandboxConfig("shm" + randomSuffix())
		cfg.Annotations = map[string]string{shmSizeAnnotation: bad}
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		wantCode(t, err, codes.InvalidArgument)
		if err != nil && !strings.Contains(err.Error(), shmSizeAnnotation) {
			t.Errorf("%q: error %v does not name the annotation", bad, err)
		}
	}
	if n := fake.Calls("CreateContainer") - before; n != 0 {
		t.Errorf("invalid shm sizes created %d containers", n)
	}
}

// A /dev/shm size above the node's memory and swap is refused; one of the node's memory is not.
func TestShmSizeIsBoundedByTheNodesMemory(t *testing.T) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Skip(err)
	}
	node := int64(si.Totalram+si.Totalswap) * int64(si.Unit)
	if node >= 1<<40 {
		t.Skipf("node memory %d is not below the 1 TiB bound used when it is unknown", node)
	}
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	for size, ok := range map[int64]bool{node: true, node + 1<<20: false} {
		cfg := sandboxConfig("shm" + randomSuffix())
		cfg.Annotations = map[string]string{shmSizeAnnotation: strconv.FormatInt(size, 10)}
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if ok && err != nil || !ok && status.Code(err) != codes.InvalidArgument {
			t.Errorf("shm size %d of a node with %d bytes: %v", size, node, err)
		}
	}
}
