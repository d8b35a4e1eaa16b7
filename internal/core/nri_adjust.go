package core

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// NRI plugins adjust a container as an OCI spec; we have no spec, only Docker's create
// request, so what NRI asks is mapped onto that request here. Docker has no setting for much of
// the spec (hooks, cgroups path, seccomp as a policy object, scheduler, RDT ...): those are
// refused rather than dropped, since a plugin that asked for them counts on them.

// dockerCaps is what the Docker engine can do that adjustments may need.
type dockerCaps struct {
	// CDI: the engine takes CDI devices (DeviceRequests with Driver "cdi", Docker 25+ with CDI on).
	CDI bool
	// APIVersion is the negotiated Engine API version ("1.41" on Docker 20.10).
	APIVersion string
}

// nriRefused is an adjustment Docker cannot apply, naming NRI's field path.
func nriRefused(field, why string) error {
	return invalidf("NRI adjustment: %s: Docker cannot %s", field, why)
}

// applyNRIAdjustment applies what NRI plugins asked for (adaptation's merged answer) to the
// Docker configuration of a container about to be created. What Docker cannot apply fails
// with InvalidArgument naming the field (e.g. "linux.resources.hugepage_limits").
//
// Adaptation answers with empty sub-messages where no plugin asked anything, so only set
// fields count: wrapper messages when present, scalars when non-zero, lists and maps when not
// empty.
func applyNRIAdjustment(adj *api.ContainerAdjustment, cfg *container.Config, hc *container.HostConfig, caps dockerCaps) error {
	if adj == nil {
		return nil
	}
	if h := adj.Hooks; h != nil && len(h.Prestart)+len(h.CreateRuntime)+len(h.CreateContainer)+len(h.StartContainer)+len(h.Poststart)+len(h.Poststop) > 0 {
		return invalidf("NRI adjustment: hooks: Docker runs no OCI hooks")
	}
	if err := checkNRILinux(adj.Linux); err != nil {
		return err
	}
	nriAnnotations(adj.Annotations, cfg, hc)
	if err := nriEnv(adj.Env, cfg); err != nil {
		return err
	}
	// Adaptation strips UpdateArgs' leading "" marker; a lone one would mean no command.
	if args := adj.Args; len(args) > 0 && args[0] != "" {
		cfg.Entrypoint, cfg.Cmd = slices.Clone(args[:1]), slices.Clone(args[1:])
	}
	for _, m := range adj.Mounts {
		if err := nriMount(m, hc, caps); err != nil {
			return err
		}
	}
	for _, r := range adj.Rlimits {
		name, ok := strings.CutPrefix(r.Type, "RLIMIT_")
		if !ok || name == "" {
			return invalidf("NRI adjustment: rlimits: %q is not an RLIMIT_ name", r.Type)
		}
		name = strings.ToLower(name)
		hc.Ulimits = slices.DeleteFunc(hc.Ulimits, func(u *container.Ulimit) bool { return u.Name == name })
		// RLIM_INFINITY (all ones) becomes -1, which Docker passes on as unlimited.
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: name, Hard: int64(r.Hard), Soft: int64(r.Soft)})
	}
	if len(adj.CDIDevices) > 0 {
		if !caps.CDI {
			return invalidf("NRI adjustment: CDI_devices: the Docker engine needs CDI (Docker 25+ with CDI on); this one speaks Engine API %s without it", caps.APIVersion)
		}
		ids := make([]string, 0, len(adj.CDIDevices))
		for _, d := range adj.CDIDevices {
			if d.GetName() == "" {
				return invalidf("NRI adjustment: CDI_devices: a device has no name")
			}
			ids = append(ids, d.Name)
		}
		hc.DeviceRequests = append(hc.DeviceRequests, container.DeviceRequest{Driver: "cdi", DeviceIDs: ids})
	}
	return nriLinux(adj.Linux, hc)
}

// nriSet reports whether m sets anything: adaptation's answer holds empty messages (an empty
// Rdt as soon as a plugin adjusts anything under linux) where no plugin asked for anything.
func nriSet(m proto.Message) bool {
	if m == nil || !m.ProtoReflect().IsValid() {
		return false
	}
	var fields []string
	setFields(m.ProtoReflect(), "", &fields)
	return len(fields) > 0
}

// checkNRILinux refuses the Linux fields Docker has no setting for, before anything changes.
func checkNRILinux(l *api.LinuxContainerAdjustment) error {
	if l == nil {
		return nil
	}
	switch {
	case l.CgroupsPath != "":
		return nriRefused("linux.cgroups_path", "set a container's cgroup path (it derives it from the cgroup parent)")
	case nriSet(l.IoPriority):
		return nriRefused("linux.io_priority", "set a container's I/O priority")
	case nriSet(l.SeccompPolicy):
		return nriRefused("linux.seccomp_policy", "take a seccomp policy from NRI")
	case len(l.Namespaces) > 0:
		return nriRefused("linux.namespaces", "change a container's namespaces by path")
	case len(l.NetDevices) > 0:
		return nriRefused("linux.net_devices", "move network devices into a container")
	case nriSet(l.Scheduler):
		return nriRefused("linux.scheduler", "set a container's scheduling policy")
	case nriSet(l.Rdt):
		return nriRefused("linux.rdt", "set a container's RDT settings")
	case nriSet(l.MemoryPolicy):
		return nriRefused("linux.memory_policy", "set a container's NUMA memory policy")
	}
	r := l.Resources
	if r == nil {
		return nil
	}
	switch {
	case len(r.HugepageLimits) > 0:
		return nriRefused("linux.resources.hugepage_limits", "limit hugepages per container")
	case r.BlockioClass != nil:
		return nriRefused("linux.resources.blockio_class", "set a block I/O class")
	case r.RdtClass != nil:
		return nriRefused("linux.resources.rdt_class", "set an RDT class")
	case len(r.Devices) > 0:
		return nriRefused("linux.resources.devices", "take cgroup device rules")
	case len(r.Unified) > 0:
		return nriRefused("linux.resources.unified", "set cgroup v2 files at create")
	case r.Cpu.GetRealtimeRuntime() != nil:
		return nriRefused("linux.resources.cpu.realtime_runtime", "set a realtime runtime per container at create")
	case r.Cpu.GetRealtimePeriod() != nil:
		return nriRefused("linux.resources.cpu.realtime_period", "set a realtime period per container at create")
	case r.Memory.GetKernel() != nil:
		return nriRefused("linux.resources.memory.kernel", "limit kernel memory")
	case r.Memory.GetKernelTcp() != nil:
		return nriRefused("linux.resources.memory.kernel_tcp", "limit kernel TCP memory")
	case r.Memory.GetUseHierarchy() != nil:
		return nriRefused("linux.resources.memory.use_hierarchy", "set memory.use_hierarchy")
	}
	return nil
}

// nriLinux applies the Linux fields checkNRILinux let through.
func nriLinux(l *api.LinuxContainerAdjustment, hc *container.HostConfig) error {
	if l == nil {
		return nil
	}
	for _, d := range l.Devices {
		if err := nriDevice(d, hc); err != nil {
			return err
		}
	}
	if v := l.OomScoreAdj; v != nil {
		hc.OomScoreAdj = int(v.Value)
	}
	// Removals first: a map does not say in which order a plugin removed and set a key.
	for k := range l.Sysctl {
		if key, removed := api.IsMarkedForRemoval(k); removed {
			delete(hc.Sysctls, key)
		}
	}
	for k, v := range l.Sysctl {
		if _, removed := api.IsMarkedForRemoval(k); !removed && k != "" {
			if hc.Sysctls == nil {
				hc.Sysctls = map[string]string{}
			}
			hc.Sysctls[k] = v
		}
	}
	r := l.Resources
	if r == nil {
		return nil
	}
	nriCPUAndMemory(r, &hc.Resources)
	if m := r.Memory; m != nil {
		if m.Swappiness != nil {
			v := int64(m.Swappiness.Value)
			hc.MemorySwappiness = &v
		}
		if m.DisableOomKiller != nil {
			v := m.DisableOomKiller.Value
			hc.OomKillDisable = &v
		}
	}
	if r.Pids != nil {
		v := r.Pids.Limit
		hc.PidsLimit = &v
	}
	return nil
}

// nriCPUAndMemory sets in res the CPU and memory figures r sets, for a create's adjustment
// and for a plugin's update alike; what r leaves unset stays as it is.
func nriCPUAndMemory(r *api.LinuxResources, res *container.Resources) {
	if c := r.GetCpu(); c != nil {
		if c.Shares != nil {
			res.CPUShares = int64(c.Shares.Value)
		}
		if c.Quota != nil {
			res.CPUQuota = c.Quota.Value
		}
		if c.Period != nil {
			res.CPUPeriod = int64(c.Period.Value)
		}
		if c.Cpus != "" {
			res.CpusetCpus = c.Cpus
		}
		if c.Mems != "" {
			res.CpusetMems = c.Mems
		}
	}
	if m := r.GetMemory(); m != nil {
		if m.Limit != nil {
			res.Memory = m.Limit.Value
		}
		if m.Reservation != nil {
			res.MemoryReservation = m.Reservation.Value
		}
		if m.Swap != nil {
			res.MemorySwap = m.Swap.Value
		}
	}
}

// nriAnnotations sets and removes CRI annotations: Docker labels under annotationPrefix, listed
// in criKeysLabel so that splitLabels returns them, and the OCI annotations when we pass them.
func nriAnnotations(adj map[string]string, cfg *container.Config, hc *container.HostConfig) {
	if len(adj) == 0 {
		return
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	// Without a key list (or with an unreadable one) every label counts: nothing to update.
	var keys []string
	listed := json.Unmarshal([]byte(cfg.Labels[criKeysLabel]), &keys) == nil
	for k := range adj {
		if key, removed := api.IsMarkedForRemoval(k); removed {
			delete(cfg.Labels, annotationPrefix+key)
			keys = slices.DeleteFunc(keys, func(s string) bool { return s == annotationPrefix+key })
			delete(hc.Annotations, key)
		}
	}
	for k, v := range adj {
		if _, removed := api.IsMarkedForRemoval(k); removed || k == "" {
			continue
		}
		cfg.Labels[annotationPrefix+k] = v
		if !slices.Contains(keys, annotationPrefix+k) {
			keys = append(keys, annotationPrefix+k)
		}
		if hc.Annotations != nil {
			hc.Annotations[k] = v
		}
	}
	if listed {
		sort.Strings(keys)
		raw, _ := json.Marshal(keys)
		cfg.Labels[criKeysLabel] = string(raw)
	}
}

// nriEnv sets (replacing NAME=...) and removes environment variables, in the plugins' order.
func nriEnv(env []*api.KeyValue, cfg *container.Config) error {
	for _, e := range env {
		name, removed := api.IsMarkedForRemoval(e.GetKey())
		if name == "" || strings.Contains(name, "=") {
			return invalidf("NRI adjustment: env: %q is not a variable name", e.GetKey())
		}
		i := slices.IndexFunc(cfg.Env, func(s string) bool { return s == name || strings.HasPrefix(s, name+"=") })
		switch {
		case removed && i >= 0:
			cfg.Env = slices.Delete(cfg.Env, i, i+1)
		case removed:
		case i >= 0:
			cfg.Env[i] = name + "=" + e.Value
		default:
			cfg.Env = append(cfg.Env, name+"="+e.Value)
		}
	}
	return nil
}

// nriMount replaces or removes what is mounted at a destination, as NRI's spec generator does.
// Only bind and tmpfs mounts have Docker equivalents.
func nriMount(m *api.Mount, hc *container.HostConfig, caps dockerCaps) error {
	dest, removed := m.IsMarkedForRemoval()
	bad := func(format string, args ...any) error {
		return invalidf("NRI adjustment: mounts[%s]: "+format, append([]any{dest}, args...)...)
	}
	if !filepath.IsAbs(dest) {
		return bad("the destination must be an absolute path")
	}
	// The CRI's mounts are in Mounts, or Binds when relabelled for SELinux; the sandbox's /dev/shm
	// and the like may be in Tmpfs.
	dest = filepath.Clean(dest)
	hc.Mounts = slices.DeleteFunc(hc.Mounts, func(x mount.Mount) bool { return filepath.Clean(x.Target) == dest })
	hc.Binds = slices.DeleteFunc(hc.Binds, func(b string) bool {
		parts := strings.Split(b, ":")
		return len(parts) >= 2 && filepath.Clean(parts[1]) == dest
	})
	delete(hc.Tmpfs, dest)
	if removed {
		return nil
	}
	typ := m.Type
	if typ == "" && (slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")) {
		typ = "bind"
	}
	out := mount.Mount{Target: dest}
	switch typ {
	case "bind":
		if !filepath.IsAbs(m.Source) {
			return bad("bind source %q must be an absolute host path", m.Source)
		}
		out.Type, out.Source = mount.TypeBind, m.Source
		opts := &mount.BindOptions{}
		for _, o := range m.Options {
			switch o {
			case "rbind", "rw":
			case "bind":
				opts.NonRecursive = true
			case "ro":
				out.ReadOnly = true
			case "rprivate", "private", "rshared", "shared", "rslave", "slave":
				opts.Propagation = mount.Propagation(o)
			default:
				return bad("Docker cannot apply bind option %q", o)
			}
		}
		// As runc does with "ro": the mount itself is read-only, its submounts keep theirs.
		// From API 1.44 Docker would make it read-only all the way down unless told.
		opts.ReadOnlyNonRecursive = out.ReadOnly && featuresOf(caps.APIVersion).readOnlyModes
		if *opts != (mount.BindOptions{}) {
			out.BindOptions = opts
		}
	case "tmpfs":
		out.Type = mount.TypeTmpfs
		opts := &mount.TmpfsOptions{}
		for _, o := range m.Options {
			k, v, _ := strings.Cut(o, "=")
			var err error
			switch k {
			case "rw":
			case "ro":
				out.ReadOnly = true
			case "size":
				opts.SizeBytes, err = parseTmpfsSize(v)
			case "mode":
				var mode uint64
				mode, err = strconv.ParseUint(v, 8, 32)
				opts.Mode = os.FileMode(mode)
			default:
				return bad("Docker cannot apply tmpfs option %q", o)
			}
			if err != nil {
				return bad("tmpfs option %q: %v", o, err)
			}
		}
		if opts.SizeBytes != 0 || opts.Mode != 0 {
			out.TmpfsOptions = opts
		}
	default:
		return bad("Docker cannot mount type %q (only bind and tmpfs)", m.Type)
	}
	hc.Mounts = append(hc.Mounts, out)
	return nil
}

// parseTmpfsSize reads a tmpfs size= value: bytes, or with a k, m or g suffix.
func parseTmpfsSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, errors.New("not a size in bytes (k, m or g suffix allowed)")
	}
	return v * mult, nil
}

// devLinks holds udev's char/ and block/ links to the host's device nodes by major:minor.
var devLinks = "/dev"

// statDevice says what device node path is on the host; a variable so that tests need none.
var statDevice = func(path string) (typ string, major, minor int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", 0, 0, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	case unix.S_IFIFO:
		typ = "p"
	default:
		return "", 0, 0, errors.New("not a device node")
	}
	rdev := uint64(st.Rdev)
	return typ, int64(unix.Major(rdev)), int64(unix.Minor(rdev)), nil
}

// nriDevice adds (or removes, by path) a device. NRI describes a device node to create; Docker
// passes a host node through, so the host must have a node of that type and number: at the
// same path, or the one udev links from /dev/char or /dev/block (by major:minor). Its mode and
// owner come from the host node.
func nriDevice(d *api.LinuxDevice, hc *container.HostConfig) error {
	path, removed := d.IsMarkedForRemoval()
	if !filepath.IsAbs(path) {
		return invalidf("NRI adjustment: linux.devices[%s]: the path must be absolute", path)
	}
	hc.Devices = slices.DeleteFunc(hc.Devices, func(x container.DeviceMapping) bool { return x.PathInContainer == path })
	if removed {
		return nil
	}
	want := d.Type
	if want == "u" { // unbuffered character device: a character device node
		want = "c"
	}
	host := path
	typ, major, minor, err := statDevice(host)
	if err != nil || typ != want || major != d.Major || minor != d.Minor {
		dir := map[string]string{"c": "char", "b": "block"}[want]
		if link, lerr := filepath.EvalSymlinks(filepath.Join(devLinks, dir, strconv.FormatInt(d.Major, 10)+":"+strconv.FormatInt(d.Minor, 10))); dir != "" && lerr == nil {
			if t, ma, mi, serr := statDevice(link); serr == nil && t == want && ma == d.Major && mi == d.Minor {
				host, err = link, nil
			}
		}
	}
	if host == path && err != nil {
		return invalidf("NRI adjustment: linux.devices[%s]: Docker can only pass a host device node through, and the host has no %s %d:%d: %v", path, d.Type, d.Major, d.Minor, err)
	}
	if host == path && (typ != want || major != d.Major || minor != d.Minor) {
		return invalidf("NRI adjustment: linux.devices[%s]: Docker can only pass a host device node through; the host's %s is %s %d:%d, and it has no other %s %d:%d", path, path, typ, major, minor, d.Type, d.Major, d.Minor)
	}
	hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: host, PathInContainer: path, CgroupPermissions: "rwm"})
	return nil
}
