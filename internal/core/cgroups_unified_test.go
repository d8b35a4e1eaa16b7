package core

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/unifiedcgroup"
)

// The CRI's unified map holds cgroup v2 files and values (Documentation/admin-guide/
// cgroup-v2.rst) for the container's cgroup. What has a Docker setting goes to Docker; the
// rest is written into the cgroup once the container runs, leaving out at create the kernel's
// defaults, which a new cgroup has. Values Docker's settings cannot take are logged once.
func TestUnifiedResourcesMap(t *testing.T) {
	const mi = 1 << 20
	pids := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name   string
		res    *runtimeapi.LinuxContainerResources
		want   container.Resources
		files  string   // the files to write after start, at create
		warned []string // the unified keys logged
	}{
		{
			name: "the kubelet on cgroup v2, a Burstable container without swap",
			res: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 * mi, MemorySwapLimitInBytes: 128 * mi,
				Unified: map[string]string{"memory.high": "max", "memory.oom.group": "1", "memory.swap.max": "0"}},
			want:  container.Resources{Memory: 128 * mi, MemorySwap: 128 * mi},
			files: "memory.oom.group=1",
		},
		{
			name:  "the kubelet on cgroup v2 with singleProcessOOMKill",
			res:   &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, Unified: map[string]string{"memory.high": "max", "memory.oom.group": "0"}},
			want:  container.Resources{Memory: 64 * mi, MemorySwap: 64 * mi},
			files: "",
		},
		{
			name:  "a BestEffort container: Docker limits swap only with memory, so the file is written",
			res:   &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.swap.max": "0", "memory.high": "max", "memory.oom.group": "1"}},
			want:  container.Resources{},
			files: "memory.oom.group=1 memory.swap.max=0",
		},
		{
			name:  "limits given only as files",
			res:   &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.max": "268435456", "memory.swap.max": "67108864", "memory.low": "33554432", "pids.max": "100"}},
			want:  container.Resources{Memory: 256 * mi, MemorySwap: 256*mi + 64*mi, MemoryReservation: 32 * mi, PidsLimit: pids(100)},
			files: "",
		},
		{
			name:  "unlimited swap and pids",
			res:   &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, Unified: map[string]string{"memory.swap.max": "max", "pids.max": "max", "memory.max": "max"}},
			want:  container.Resources{Memory: 64 * mi, MemorySwap: -1, PidsLimit: pids(-1)},
			files: "",
		},
		{
			name: "the CRI field wins over memory.max",
			res:  &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mi, Unified: map[string]string{"memory.max": "1073741824"}},
			want: container.Resources{Memory: 64 * mi, MemorySwap: 64 * mi},
		},
		{
			name:  "MemoryQoS and files Docker has no setting for",
			res:   &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1073741824", "memory.min": "8388608", "cpu.weight": "100", "io.max": "8:0 rbps=1048576"}},
			want:  container.Resources{},
			files: "cpu.weight=100 io.max=8:0 rbps=1048576 memory.high=1073741824 memory.min=8388608",
		},
		{
			name:   "values that are not numbers",
			res:    &runtimeapi.LinuxContainerResources{Unified: map[string]string{"pids.max": "lots", "memory.low": "-1", "memory.max": "1G"}},
			want:   container.Resources{},
			warned: []string{"memory.low", "memory.max", "pids.max"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger, hook := logtest.NewNullLogger()
			s := &Service{log: logrus.NewEntry(logger)}
			got, files, err := s.dockerResources(tc.res, true)
			if err != nil {
				t.Fatal(err)
			}
			if got.Memory != tc.want.Memory || got.MemorySwap != tc.want.MemorySwap || got.MemoryReservation != tc.want.MemoryReservation ||
				(got.PidsLimit == nil) != (tc.want.PidsLimit == nil) || (got.PidsLimit != nil && *got.PidsLimit != *tc.want.PidsLimit) {
				t.Errorf("resources memory %d swap %d reservation %d pids %v, want %d %d %d %v", got.Memory, got.MemorySwap, got.MemoryReservation, deref(got.PidsLimit),
					tc.want.Memory, tc.want.MemorySwap, tc.want.MemoryReservation, deref(tc.want.PidsLimit))
			}
			if s := settingsString(files); s != tc.files {
				t.Errorf("files to write %q, want %q", s, tc.files)
			}
			var warned []string
			for _, e := range hook.AllEntries() {
				if e.Level != logrus.WarnLevel {
					continue
				}
				for k := range tc.res.Unified {
					if strings.Contains(e.Message, k+"=") {
						warned = append(warned, k)
					}
				}
			}
			sort.Strings(warned)
			if strings.Join(warned, " ") != strings.Join(tc.warned, " ") {
				t.Errorf("warned about %v, want %v; log: %v", warned, tc.warned, messages(hook))
			}
			// Once per kind: the kubelet sends the same map for every container.
			hook.Reset()
			s.dockerResources(tc.res, true)
			if n := len(hook.AllEntries()); n != 0 {
				t.Errorf("%d more warnings for the same map: %v", n, messages(hook))
			}
			// An update writes the defaults too: they may undo an earlier value.
			if _, again, _ := s.dockerResources(tc.res, false); len(again) < len(files) {
				t.Errorf("update: files %q, fewer than at create", settingsString(again))
			}
		})
	}
}

// A unified file that is not a controller's file of the container's own cgroup is refused.
func TestUnifiedResourcesRefused(t *testing.T) {
	s := &Service{log: logrus.NewEntry(logrus.New())}
	for _, file := range []string{"../../cgroup.procs", "memory.high/../x", "cgroup.procs", "cgroup.subtree_control", "memory", ".high", "memory.", "Memory.high", "memory..high"} {
		_, _, err := s.dockerResources(&runtimeapi.LinuxContainerResources{Unified: map[string]string{file: "1"}}, true)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("unified %q: %v, want InvalidArgument", file, err)
		}
	}
	_, _, err := s.dockerResources(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1\nmax"}}, true)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a two-line value: %v, want InvalidArgument", err)
	}
}

func settingsString(files []unifiedcgroup.Setting) string {
	var out []string
	for _, f := range files {
		out = append(out, f.File+"="+f.Value)
	}
	return strings.Join(out, " ")
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func messages(hook *logtest.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		out = append(out, e.Message)
	}
	return out
}

// The unified map reaches Docker at create and in updates.
func TestUnifiedResourcesAtCreateAndUpdate(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "unified", "")
	cfg := containerConfig("c")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 128 << 20,
		Unified:            map[string]string{"memory.swap.max": "max", "pids.max": "50", "memory.high": "max", "memory.oom.group": "0"},
	}}
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	hostConfig := func() *container.HostConfig {
		t.Helper()
		inspect, err := fake.InspectContainer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return inspect.HostConfig
	}
	if hc := hostConfig(); hc.Memory != 128<<20 || hc.MemorySwap != -1 || hc.PidsLimit == nil || *hc.PidsLimit != 50 {
		t.Errorf("created with memory %d swap %d pids %v", hc.Memory, hc.MemorySwap, deref(hc.PidsLimit))
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	// The kubelet's in-place resize on cgroup v2: the new limit and swap as files.
	if _, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 256 << 20,
		Unified:            map[string]string{"memory.swap.max": "0", "pids.max": "80", "memory.high": "max"},
	}}); err != nil {
		t.Fatal(err)
	}
	if hc := hostConfig(); hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || *hc.PidsLimit != 80 {
		t.Errorf("updated to memory %d swap %d pids %v", hc.Memory, hc.MemorySwap, deref(hc.PidsLimit))
	}
}
