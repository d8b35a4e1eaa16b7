package core

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nriBase is a container as createConfig makes it, before NRI adjusts it.
func nriBase() (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Env:        []string{"KEEP=1", "OLD=x", "GONE=y"},
		Entrypoint: []string{"/bin/app"},
		Cmd:        []string{"--flag"},
		Labels:     makeLabels(map[string]string{"app": "a"}, map[string]string{"old": "o", "gone": "g"}),
	}
	hc := &container.HostConfig{
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: "/host/data", Target: "/data"},
			{Type: mount.TypeBind, Source: "/host/gone", Target: "/gone"},
		},
		Binds:       []string{"/host/sel:/sel:Z"},
		Annotations: map[string]string{"old": "o", "gone": "g"},
		Sysctls:     map[string]string{"net.ipv4.ip_forward": "1"},
		Resources: container.Resources{
			Ulimits: []*container.Ulimit{{Name: "nofile", Hard: 10, Soft: 10}, {Name: "core", Hard: 1, Soft: 1}},
			Devices: []container.DeviceMapping{{PathOnHost: "/dev/old", PathInContainer: "/dev/old", CgroupPermissions: "rwm"}},
		},
	}
	return cfg, hc
}

// fakeDevices stands in for the host's device nodes.
func fakeDevices(t *testing.T) {
	old := statDevice
	t.Cleanup(func() { statDevice = old })
	statDevice = func(path string) (string, int64, int64, error) {
		switch path {
		case "/dev/fuse":
			return "c", 10, 229, nil
		case "/dev/sda":
			return "b", 8, 0, nil
		}
		return "", 0, 0, errors.New("no such file or directory")
	}
}

func TestNRIAdjustAppliesWhatDockerCan(t *testing.T) {
	fakeDevices(t)
	i64 := func(v int64) *int64 { return &v }
	yes := true
	tests := []struct {
		name  string
		adj   *api.ContainerAdjustment
		check func(t *testing.T, cfg *container.Config, hc *container.HostConfig)
	}{{
		name: "annotations set, replaced and removed",
		adj:  &api.ContainerAdjustment{Annotations: map[string]string{"new": "n", "old": "o2", "-gone": ""}},
		check: func(t *testing.T, cfg *container.Config, hc *container.HostConfig) {
			labels, annotations := splitLabels(cfg.Labels)
			want := map[string]string{"new": "n", "old": "o2"}
			if !reflect.DeepEqual(annotations, want) || !reflect.DeepEqual(labels, map[string]string{"app": "a"}) {
				t.Errorf("splitLabels = %v, %v; want annotations %v", labels, annotations, want)
			}
			if !reflect.DeepEqual(hc.Annotations, want) {
				t.Errorf("OCI annotations = %v, want %v", hc.Annotations, want)
			}
		},
	}, {
		name: "env set, replaced and removed in order",
		adj: &api.ContainerAdjustment{Env: []*api.KeyValue{
			{Key: "NEW", Value: "n"}, {Key: "OLD", Value: "x2"}, {Key: "-GONE"}, {Key: "-NEVER"},
		}},
		check: func(t *testing.T, cfg *container.Config, _ *container.HostConfig) {
			if want := []string{"KEEP=1", "OLD=x2", "NEW=n"}; !reflect.DeepEqual(cfg.Env, want) {
				t.Errorf("env = %v, want %v", cfg.Env, want)
			}
		},
	}, {
		name: "args replace the command",
		adj:  &api.ContainerAdjustment{Args: []string{"/bin/other", "-v", "x"}},
		check: func(t *testing.T, cfg *container.Config, _ *container.HostConfig) {
			if !reflect.DeepEqual([]string(cfg.Entrypoint), []string{"/bin/other"}) || !reflect.DeepEqual([]string(cfg.Cmd), []string{"-v", "x"}) {
				t.Errorf("entrypoint %v cmd %v", cfg.Entrypoint, cfg.Cmd)
			}
		},
	}, {
		name: "mounts replaced, removed and added",
		adj: &api.ContainerAdjustment{Mounts: []*api.Mount{
			{Destination: "/data", Type: "bind", Source: "/host/other", Options: []string{"rbind", "ro", "rslave"}},
			{Destination: "-/gone"},
			{Destination: "-/sel"},
			{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=64m", "mode=1777"}},
			{Destination: "/plain", Source: "/host/plain", Options: []string{"bind"}},
		}},
		check: func(t *testing.T, _ *container.Config, hc *container.HostConfig) {
			want := []mount.Mount{
				{Type: mount.TypeBind, Source: "/host/other", Target: "/data", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}},
				{Type: mount.TypeTmpfs, Target: "/scratch", TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 64 << 20, Mode: 0o1777}},
				{Type: mount.TypeBind, Source: "/host/plain", Target: "/plain", BindOptions: &mount.BindOptions{NonRecursive: true}},
			}
			if !reflect.DeepEqual(hc.Mounts, want) || len(hc.Binds) != 0 {
				t.Errorf("mounts = %+v binds %v, want %+v", hc.Mounts, hc.Binds, want)
			}
		},
	}, {
		name: "rlimits replace one of the same name",
		adj:  &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}, {Type: "RLIMIT_NPROC", Hard: 5, Soft: 5}}},
		check: func(t *testing.T, _ *container.Config, hc *container.HostConfig) {
			want := []*container.Ulimit{{Name: "core", Hard: 1, Soft: 1}, {Name: "nofile", Hard: 4096, Soft: 1024}, {Name: "nproc", Hard: 5, Soft: 5}}
			if !reflect.DeepEqual(hc.Ulimits, want) {
				t.Errorf("ulimits = %v, want %v", hc.Ulimits, want)
			}
		},
	}, {
		name: "CDI devices",
		adj:  &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "vendor.com/gpu=0"}}},
		check: func(t *testing.T, _ *container.Config, hc *container.HostConfig) {
			want := []container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"vendor.com/gpu=0"}}}
			if !reflect.DeepEqual(hc.DeviceRequests, want) {
				t.Errorf("device requests = %v", hc.DeviceRequests)
			}
		},
	}, {
		name: "devices added and removed by path",
		adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{
			{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}, {Path: "-/dev/old"}, {Path: "/dev/sda", Type: "b", Major: 8},
		}}},
		check: func(t *testing.T, _ *container.Config, hc *container.HostConfig) {
			want := []container.DeviceMapping{
				{PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rwm"},
				{PathOnHost: "/dev/sda", PathInContainer: "/dev/sda", CgroupPermissions: "rwm"},
			}
			if !reflect.DeepEqual(hc.Devices, want) {
				t.Errorf("devices = %v", hc.Devices)
			}
		},
	}, {
		name: "resources, oom score and sysctls",
		adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
			Resources: &api.LinuxResources{
				Cpu: &api.LinuxCPU{Shares: api.UInt64(512), Quota: api.Int64(50000), Period: api.UInt64(100000), Cpus: "0-1", Mems: "0"},
				Memory: &api.LinuxMemory{Limit: api.Int64(1 << 30), Reservation: api.Int64(1 << 29), Swap: api.Int64(2 << 30),
					Swappiness: api.UInt64(10), DisableOomKiller: api.Bool(true)},
				Pids: &api.LinuxPids{Limit: 100},
			},
			OomScoreAdj: api.Int(500),
			Sysctl:      map[string]string{"-net.ipv4.ip_forward": "", "net.core.somaxconn": "1024"},
		}},
		check: func(t *testing.T, _ *container.Config, hc *container.HostConfig) {
			r := hc.Resources
			want := container.Resources{
				CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, CpusetCpus: "0-1", CpusetMems: "0",
				Memory: 1 << 30, MemoryReservation: 1 << 29, MemorySwap: 2 << 30,
				MemorySwappiness: i64(10), OomKillDisable: &yes, PidsLimit: i64(100),
				Ulimits: r.Ulimits, Devices: r.Devices,
			}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("resources = %+v\nwant %+v", r, want)
			}
			if hc.OomScoreAdj != 500 || !reflect.DeepEqual(hc.Sysctls, map[string]string{"net.core.somaxconn": "1024"}) {
				t.Errorf("oom score %d sysctls %v", hc.OomScoreAdj, hc.Sysctls)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, hc := nriBase()
			if err := applyNRIAdjustment(tc.adj, cfg, hc, dockerCaps{CDI: true, APIVersion: "1.43"}); err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg, hc)
		})
	}
}

// TestNRIAdjustEmptyChangesNothing: adaptation answers with empty sub-messages when no plugin
// asked anything; that must leave the container as it was.
func TestNRIAdjustEmptyChangesNothing(t *testing.T) {
	empty := &api.ContainerAdjustment{
		Annotations: map[string]string{}, Mounts: []*api.Mount{}, Env: []*api.KeyValue{}, Hooks: &api.Hooks{},
		Rlimits: []*api.POSIXRlimit{}, CDIDevices: []*api.CDIDevice{},
		Linux: &api.LinuxContainerAdjustment{
			Devices: []*api.LinuxDevice{},
			Resources: &api.LinuxResources{
				Memory: &api.LinuxMemory{}, Cpu: &api.LinuxCPU{}, HugepageLimits: []*api.HugepageLimit{}, Unified: map[string]string{},
			},
			Namespaces: []*api.LinuxNamespace{}, NetDevices: map[string]*api.LinuxNetDevice{}, Sysctl: map[string]string{},
			// Adaptation makes an empty Rdt as soon as a plugin adjusts anything under linux.
			Rdt: &api.LinuxRdt{}, IoPriority: &api.LinuxIOPriority{}, Scheduler: &api.LinuxScheduler{}, MemoryPolicy: &api.LinuxMemoryPolicy{},
		},
	}
	for _, adj := range []*api.ContainerAdjustment{nil, {}, empty} {
		cfg, hc := nriBase()
		if err := applyNRIAdjustment(adj, cfg, hc, dockerCaps{APIVersion: "1.41"}); err != nil {
			t.Fatal(err)
		}
		wantCfg, wantHC := nriBase()
		if !reflect.DeepEqual(cfg, wantCfg) || !reflect.DeepEqual(hc, wantHC) {
			t.Errorf("%v changed the container:\n%+v\n%+v", adj, cfg, hc)
		}
	}
}

// A read-only bind means what runc makes of "ro": from API 1.44 Docker makes "ro" recursive unless told.
func TestNRIAdjustReadOnlyBindOnNewDocker(t *testing.T) {
	cfg, hc := nriBase()
	adj := &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/ro", Type: "bind", Source: "/host/ro", Options: []string{"rbind", "ro"}}}}
	if err := applyNRIAdjustment(adj, cfg, hc, dockerCaps{APIVersion: "1.44"}); err != nil {
		t.Fatal(err)
	}
	got := hc.Mounts[len(hc.Mounts)-1]
	if !got.ReadOnly || got.BindOptions == nil || !got.BindOptions.ReadOnlyNonRecursive {
		t.Errorf("mount = %+v", got)
	}
}

func TestNRIAdjustRefusesWhatDockerCannot(t *testing.T) {
	fakeDevices(t)
	linux := func(l *api.LinuxContainerAdjustment) *api.ContainerAdjustment {
		return &api.ContainerAdjustment{Linux: l}
	}
	res := func(r *api.LinuxResources) *api.ContainerAdjustment {
		return linux(&api.LinuxContainerAdjustment{Resources: r})
	}
	tests := []struct {
		field string
		adj   *api.ContainerAdjustment
		caps  dockerCaps
	}{
		{"hooks", &api.ContainerAdjustment{Hooks: &api.Hooks{Prestart: []*api.Hook{{Path: "/bin/hook"}}}}, dockerCaps{}},
		{"CDI_devices", &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "vendor.com/gpu=0"}}}, dockerCaps{APIVersion: "1.41"}},
		{"rlimits", &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "NOFILE"}}}, dockerCaps{}},
		{"env", &api.ContainerAdjustment{Env: []*api.KeyValue{{Key: ""}}}, dockerCaps{}},
		{"mounts[/data]", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/data", Type: "overlay", Source: "overlay"}}}, dockerCaps{}},
		{"mounts[/data]", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/data", Type: "bind", Source: "rel/dir"}}}, dockerCaps{}},
		{"mounts[/data]", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/data", Type: "bind", Source: "/x", Options: []string{"nosuid"}}}}, dockerCaps{}},
		{"mounts[/data]", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/data", Type: "tmpfs", Options: []string{"size=50%"}}}}, dockerCaps{}},
		{"mounts[data]", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "data", Type: "tmpfs"}}}, dockerCaps{}},
		{"linux.devices[/dev/fuse]", linux(&api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 1}}}), dockerCaps{}},
		{"linux.devices[/dev/none]", linux(&api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{Path: "/dev/none", Type: "c", Major: 1, Minor: 3}}}), dockerCaps{}},
		{"linux.cgroups_path", linux(&api.LinuxContainerAdjustment{CgroupsPath: "/x"}), dockerCaps{}},
		{"linux.io_priority", linux(&api.LinuxContainerAdjustment{IoPriority: &api.LinuxIOPriority{Priority: 4}}), dockerCaps{}},
		{"linux.seccomp_policy", linux(&api.LinuxContainerAdjustment{SeccompPolicy: &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ERRNO"}}), dockerCaps{}},
		{"linux.namespaces", linux(&api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/proc/1/ns/net"}}}), dockerCaps{}},
		{"linux.net_devices", linux(&api.LinuxContainerAdjustment{NetDevices: map[string]*api.LinuxNetDevice{"eth1": {Name: "net1"}}}), dockerCaps{}},
		{"linux.scheduler", linux(&api.LinuxContainerAdjustment{Scheduler: &api.LinuxScheduler{Nice: 5}}), dockerCaps{}},
		{"linux.rdt", linux(&api.LinuxContainerAdjustment{Rdt: &api.LinuxRdt{ClosId: api.String("gold")}}), dockerCaps{}},
		{"linux.memory_policy", linux(&api.LinuxContainerAdjustment{MemoryPolicy: &api.LinuxMemoryPolicy{Nodes: "0"}}), dockerCaps{}},
		{"linux.resources.hugepage_limits", res(&api.LinuxResources{HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}}}), dockerCaps{}},
		{"linux.resources.blockio_class", res(&api.LinuxResources{BlockioClass: api.String("slow")}), dockerCaps{}},
		{"linux.resources.rdt_class", res(&api.LinuxResources{RdtClass: api.String("gold")}), dockerCaps{}},
		{"linux.resources.devices", res(&api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}), dockerCaps{}},
		{"linux.resources.unified", res(&api.LinuxResources{Unified: map[string]string{"memory.high": "1G"}}), dockerCaps{}},
		{"linux.resources.cpu.realtime_runtime", res(&api.LinuxResources{Cpu: &api.LinuxCPU{RealtimeRuntime: api.Int64(1000)}}), dockerCaps{}},
		{"linux.resources.cpu.realtime_period", res(&api.LinuxResources{Cpu: &api.LinuxCPU{RealtimePeriod: api.UInt64(1000)}}), dockerCaps{}},
		{"linux.resources.memory.kernel", res(&api.LinuxResources{Memory: &api.LinuxMemory{Kernel: api.Int64(1)}}), dockerCaps{}},
		{"linux.resources.memory.kernel_tcp", res(&api.LinuxResources{Memory: &api.LinuxMemory{KernelTcp: api.Int64(1)}}), dockerCaps{}},
		{"linux.resources.memory.use_hierarchy", res(&api.LinuxResources{Memory: &api.LinuxMemory{UseHierarchy: api.Bool(true)}}), dockerCaps{}},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			cfg, hc := nriBase()
			err := applyNRIAdjustment(tc.adj, cfg, hc, tc.caps)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v; want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// The real statDevice reads a node's type and numbers: /dev/null is character 1:3 on Linux.
func TestNRIAdjustStatDeviceReadsTheHostNode(t *testing.T) {
	typ, major, minor, err := statDevice("/dev/null")
	if err != nil {
		t.Skip(err)
	}
	if typ != "c" || major != 1 || minor != 3 {
		t.Errorf("/dev/null = %s %d:%d, want c 1:3", typ, major, minor)
	}
	if _, _, _, err := statDevice(t.TempDir()); err == nil {
		t.Error("a directory passed as a device node")
	}
}

// A device the host has under another path is passed through from udev's /dev/char link.
func TestNRIAdjustDeviceFoundByNumber(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "null")
	if err := os.WriteFile(node, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "char"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(node, filepath.Join(dir, "char", "1:3")); err != nil {
		t.Fatal(err)
	}
	oldStat, oldLinks := statDevice, devLinks
	t.Cleanup(func() { statDevice, devLinks = oldStat, oldLinks })
	devLinks = dir
	statDevice = func(p string) (string, int64, int64, error) {
		if p == node {
			return "c", 1, 3, nil
		}
		return "", 0, 0, os.ErrNotExist
	}
	adj := &api.ContainerAdjustment{}
	adj.AddDevice(&api.LinuxDevice{Path: "/dev/injected", Type: "c", Major: 1, Minor: 3})
	hc := &container.HostConfig{}
	if err := applyNRIAdjustment(adj, &container.Config{}, hc, dockerCaps{}); err != nil {
		t.Fatal(err)
	}
	if len(hc.Devices) != 1 || hc.Devices[0].PathOnHost != node || hc.Devices[0].PathInContainer != "/dev/injected" {
		t.Errorf("devices %+v, want %s at /dev/injected", hc.Devices, node)
	}
	adj = &api.ContainerAdjustment{}
	adj.AddDevice(&api.LinuxDevice{Path: "/dev/other", Type: "c", Major: 1, Minor: 5})
	if err := applyNRIAdjustment(adj, &container.Config{}, &container.HostConfig{}, dockerCaps{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a device the host has not: %v", err)
	}
}
