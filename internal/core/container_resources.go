package core

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/unifiedcgroup"
)

// OCI annotations that tell VM-based runtimes (Kata, gVisor) what a container is, with the
// keys containerd uses.
const (
	annotationContainerType      = "io.kubernetes.cri.container-type"
	annotationContainerName      = "io.kubernetes.cri.container-name"
	annotationImageName          = "io.kubernetes.cri.image-name"
	annotationSandboxID          = "io.kubernetes.cri.sandbox-id"
	annotationSandboxName        = "io.kubernetes.cri.sandbox-name"
	annotationSandboxNamespace   = "io.kubernetes.cri.sandbox-namespace"
	annotationSandboxUID         = "io.kubernetes.cri.sandbox-uid"
	annotationSandboxLogDir      = "io.kubernetes.cri.sandbox-log-directory"
	annotationSandboxCPUPeriod   = "io.kubernetes.cri.sandbox-cpu-period"
	annotationSandboxCPUQuota    = "io.kubernetes.cri.sandbox-cpu-quota"
	annotationSandboxCPUShares   = "io.kubernetes.cri.sandbox-cpu-shares"
	annotationSandboxMemory      = "io.kubernetes.cri.sandbox-memory"
	annotationContainerTypeValue = "container"
	annotationSandboxTypeValue   = "sandbox"
)

// applyResources maps a container's Linux resources onto Docker's at create time. What Docker
// has no setting for comes back as cgroup v2 files to write once the container runs (see
// startCgroupV2Label); the kernel's defaults are left out, since a new cgroup has them.
func (s *Service) applyResources(hc *container.HostConfig, r *runtimeapi.LinuxContainerResources) ([]unifiedcgroup.Setting, error) {
	if r == nil {
		return nil, nil
	}
	res, files, err := s.dockerResources(r, true)
	if err != nil {
		return nil, err
	}
	hc.CPUPeriod, hc.CPUQuota, hc.CPUShares = res.CPUPeriod, res.CPUQuota, res.CPUShares
	hc.Memory, hc.MemorySwap, hc.MemoryReservation = res.Memory, res.MemorySwap, res.MemoryReservation
	hc.CpusetCpus, hc.CpusetMems, hc.PidsLimit = res.CpusetCpus, res.CpusetMems, res.PidsLimit
	hc.OomScoreAdj = s.oomScoreAdj(r.OomScoreAdj)
	return files, nil
}

// dockerResources converts CRI resources into Docker's, and the unified map's files that
// Docker cannot take into cgroup v2 settings to write into the container's cgroup.
//
// Docker has no per-container hugetlb limit (the kubelet's pod cgroup enforces it). Of the
// unified map it takes memory.max, memory.low, pids.max and, with a memory limit,
// memory.swap.max; everything else (the kubelet's memory.oom.group, MemoryQoS's memory.high and
// memory.min, memory.swap.max without a memory limit, any other controller file) is written
// into the cgroup, as runc does with the map. atCreate leaves out the kernel's defaults
// (memory.high "max", memory.oom.group "0", memory.swap.max "max"), which a new cgroup has.
func (s *Service) dockerResources(r *runtimeapi.LinuxContainerResources, atCreate bool) (container.Resources, []unifiedcgroup.Setting, error) {
	res := container.Resources{
		CPUPeriod:  r.CpuPeriod,
		CPUQuota:   r.CpuQuota,
		CPUShares:  r.CpuShares,
		Memory:     r.MemoryLimitInBytes,
		CpusetCpus: r.CpusetCpus,
		CpusetMems: r.CpusetMems,
	}
	if r.MemorySwapLimitInBytes != 0 {
		res.MemorySwap = r.MemorySwapLimitInBytes
	}
	for _, h := range r.HugepageLimits {
		if h.GetLimit() > 0 {
			s.warnOnce("hugepages", "Docker cannot limit hugepages per container (%s: %d bytes asked); the pod's cgroup limit set by the kubelet applies", h.PageSize, h.Limit)
		}
	}
	keys := make([]string, 0, len(r.Unified))
	for k := range r.Unified {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var files []unifiedcgroup.Setting
	write := func(k, v string) { files = append(files, unifiedcgroup.Setting{File: k, Value: v}) }
	for _, k := range keys {
		v := strings.TrimSpace(r.Unified[k])
		if err := unifiedcgroup.Check(k, v); err != nil {
			return res, nil, invalidf("linux resources: unified: %v", err)
		}
		number := func() (int64, bool) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				s.warnOnce("unified:"+k+"="+v, "cgroup v2 %s=%q ignored: not a number or \"max\"", k, v)
				return 0, false
			}
			return n, true
		}
		switch k {
		case "memory.max":
			if res.Memory == 0 && v != "max" {
				if n, ok := number(); ok {
					res.Memory = n
				}
			}
		case "memory.low":
			if n, ok := number(); ok {
				res.MemoryReservation = n
			}
		case "memory.swap.max":
			switch {
			case res.Memory == 0:
				// Docker limits swap only together with memory (MemorySwap is memory+swap).
				write(k, v)
			case v == "max":
				res.MemorySwap = -1
			default:
				if n, ok := number(); ok {
					res.MemorySwap = addSaturating(res.Memory, n)
				}
			}
		case "pids.max":
			n := int64(-1)
			if v != "max" {
				parsed, ok := number()
				if !ok {
					continue
				}
				n = parsed
			}
			res.PidsLimit = &n
		case "memory.high":
			write(k, v)
		case "memory.oom.group":
			write(k, v)
		default:
			write(k, v)
		}
	}
	carrySwap(&res)
	if atCreate {
		files = withoutKernelDefaults(files)
	}
	return res, files, nil
}

// kernelDefaults are the values a new cgroup v2 has, which the kubelet sends to every
// container: memory.high "max" (MemoryQoS off), memory.oom.group "0" (singleProcessOOMKill).
var kernelDefaults = map[string]string{"memory.high": "max", "memory.oom.group": "0", "memory.swap.max": "max"}

func withoutKernelDefaults(files []unifiedcgroup.Setting) []unifiedcgroup.Setting {
	return slices.DeleteFunc(files, func(f unifiedcgroup.Setting) bool {
		d, ok := kernelDefaults[f.File]
		return ok && f.Value == d
	})
}

// carrySwap gives a memory limit that comes without a swap limit the swap limit "no swap":
// Docker's MemorySwap (memory+swap) equal to Memory, at create and in every update.
//
// The CRI's memory_swap_limit_in_bytes is memory+swap, 0 when unset. The kubelet sets it to
// the memory limit (no swap; on cgroup v2 memory.swap.max=0) unless the node gives pods swap,
// containerd gives a memory limit without one exactly that (opts.WithResources: swap = limit),
// and upstream cri-dockerd always sends MemorySwap = Memory. Docker's own default would be
// twice the memory at create, and an update whose memory limit is above the container's stored
// MemorySwap fails unless it sets MemorySwap too; a container without a memory limit stores 0
// (or -1), so there a memory limit alone always failed ("Memory limit should be smaller than
// already set memoryswap limit"). Where the kernel has no swap accounting, Docker turns
// MemorySwap into -1 itself, with a warning.
func carrySwap(res *container.Resources) {
	if res.Memory > 0 && res.MemorySwap == 0 {
		res.MemorySwap = res.Memory
	}
}

// applyDevices maps device mappings and CDI devices. CDI devices need a daemon that resolves
// them (Engine API >= 1.44 with the cdi feature): older daemons are refused here rather than
// fail at start with "could not select device driver".
func (s *Service) applyDevices(hc *container.HostConfig, devices []*runtimeapi.Device, cdi []*runtimeapi.CDIDevice) error {
	for _, d := range devices {
		if d.HostPath == "" {
			return invalidf("device -> %q: host_path is required", d.ContainerPath)
		}
		perms := d.Permissions
		if perms == "" {
			perms = "rwm"
		}
		if strings.Trim(perms, "rwm") != "" {
			return invalidf("device %q: permissions %q: only r, w and m are allowed", d.HostPath, d.Permissions)
		}
		target := d.ContainerPath
		if target == "" {
			target = d.HostPath
		}
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: d.HostPath, PathInContainer: target, CgroupPermissions: perms})
	}
	if len(cdi) == 0 {
		return nil
	}
	if e := s.engine(); !e.cdi {
		return status.Errorf(codes.FailedPrecondition, "CDI devices need Docker Engine API %s or newer with CDI enabled; this daemon speaks %s", apiCDI, e.apiVersion)
	}
	ids := make([]string, 0, len(cdi))
	for _, d := range cdi {
		if d.GetName() == "" {
			return invalidf("CDI device: a fully qualified name is required (vendor.com/class=name)")
		}
		ids = append(ids, d.Name)
	}
	hc.DeviceRequests = append(hc.DeviceRequests, container.DeviceRequest{Driver: "cdi", DeviceIDs: ids})
	return nil
}

// annotationsReachRuntimes reports whether HostConfig.Annotations reach the OCI spec, and warns
// once where they do not.
func (s *Service) annotationsReachRuntimes() bool {
	e := s.engine()
	if !e.annotations {
		s.warnOnce("annotations", "Docker Engine API %s < %s: OCI annotations (io.kubernetes.cri.*: pod identity and resources) do not reach runtimes; VM-based runtimes size their VMs without them", e.apiVersion, apiAnnotations)
	}
	return e.annotations
}

// applyContainerAnnotations tells the runtime which pod a container belongs to, through OCI
// annotations, as containerd does for VM-based runtimes. Daemons before API 1.43 drop them.
//
// The container type and sandbox id are left out for runsc behind the runc shim: with them,
// containerd's runc shim serves the pod's containers from one shim, and runsc starts the
// container inside the pause container's gVisor sandbox, where `runsc start` leaves a gofer
// holding its output pipe open and the shim waits on it forever (StartContainer hangs, seen on
// Docker 29.8). gVisor groups a pod's containers only through its own shim
// (io.containerd.runsc.v1); through the runc shim each container is a gVisor sandbox of its
// own, in the pod's namespaces, as on daemons that drop annotations.
func (s *Service) applyContainerAnnotations(ctx context.Context, hc *container.HostConfig, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) {
	if !s.annotationsReachRuntimes() {
		return
	}
	m := sandboxCfg.GetMetadata()
	if hc.Annotations == nil {
		hc.Annotations = map[string]string{}
	}
	if info, err := s.runtimes.get(ctx); err != nil || !info.runscBehindRuncShim(hc.Runtime) {
		hc.Annotations[annotationContainerType] = annotationContainerTypeValue
		hc.Annotations[annotationSandboxID] = sandboxID
	}
	hc.Annotations[annotationContainerName] = cfg.GetMetadata().GetName()
	hc.Annotations[annotationImageName] = cfg.GetImage().GetImage()
	hc.Annotations[annotationSandboxName] = m.GetName()
	hc.Annotations[annotationSandboxNamespace] = m.GetNamespace()
	hc.Annotations[annotationSandboxUID] = m.GetUid()
}

// sandboxAnnotations are the OCI annotations of a sandbox container, for sandbox_run.go to set
// as HostConfig.Annotations: the pod's identity and, for VM-based runtimes that size the VM
// from them, the pod's resources and overhead. It returns nil when the daemon cannot pass
// annotations (API < 1.43).
func (s *Service) sandboxAnnotations(cfg *runtimeapi.PodSandboxConfig) map[string]string {
	if !s.annotationsReachRuntimes() {
		return nil
	}
	m := cfg.GetMetadata()
	out := map[string]string{
		annotationContainerType:    annotationSandboxTypeValue,
		annotationSandboxName:      m.GetName(),
		annotationSandboxNamespace: m.GetNamespace(),
		annotationSandboxUID:       m.GetUid(),
		annotationSandboxLogDir:    cfg.GetLogDirectory(),
	}
	// The pod's resources plus its overhead: what the VM must hold.
	res, over := cfg.GetLinux().GetResources(), cfg.GetLinux().GetOverhead()
	if res != nil || over != nil {
		out[annotationSandboxCPUPeriod] = strconv.FormatInt(res.GetCpuPeriod(), 10)
		out[annotationSandboxCPUQuota] = strconv.FormatInt(addSaturating(res.GetCpuQuota(), over.GetCpuQuota()), 10)
		out[annotationSandboxCPUShares] = strconv.FormatInt(addSaturating(res.GetCpuShares(), over.GetCpuShares()), 10)
		out[annotationSandboxMemory] = strconv.FormatInt(addSaturating(res.GetMemoryLimitInBytes(), over.GetMemoryLimitInBytes()), 10)
	}
	return out
}

// onceLogger logs each kind of message once per process: the kubelet repeats the same request
// for every container, and the log should say it once.
type onceLogger struct{ seen sync.Map }

func (s *Service) warnOnce(key, format string, args ...any) {
	if _, loaded := s.once.seen.LoadOrStore(key, true); !loaded {
		s.log.Warnf(format, args...)
	}
}
