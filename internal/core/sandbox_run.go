package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/go-connections/nat"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/core/startgate"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// cleanupTimeout bounds the removal of what a failed call created; it runs even when the
// caller's context is already done, so nothing is left behind.
const cleanupTimeout = 30 * time.Second

// RunPodSandbox creates and starts the pod's sandbox (pause) container on the runtime the pod's
// RuntimeClass handler names. The handler is resolved before anything is created: a pod with
// an unknown handler leaves nothing behind.
func (s *Service) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	if err := validateSandboxConfig(cfg); err != nil {
		return nil, err
	}
	rt, err := s.resolveHandler(ctx, req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	// The network plugin must be ready (a CNI config and its plugins) before anything is made.
	att, err := s.planSandboxNetwork(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.ensureImage(ctx, s.opts.PodInfraImage); err != nil {
		return nil, dockerError(err, "pull pod infra image %q", s.opts.PodInfraImage)
	}

	containerCfg, hostCfg, err := s.sandboxDockerConfig(cfg, rt, att != nil)
	if err != nil {
		return nil, err
	}
	name := makeSandboxName(cfg.Metadata)
	id, err := s.createContainer(ctx, name, containerCfg, hostCfg)
	if err != nil {
		return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("create sandbox %q", name), rt)
	}
	s.sandboxes.put(id, rt)
	s.sandboxes.remember(id, recordOfConfig(cfg, rt))

	if err := s.startContainer(ctx, id, startgate.Sandbox); err != nil {
		s.reclaimFailedStart(ctx, id, err)
		s.removeAfterFailure(ctx, id)
		s.sandboxes.remove(id)
		return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("start sandbox %q", name), rt)
	}
	if att != nil {
		if err := s.setUpSandboxNetwork(ctx, id, att); err != nil {
			s.removeAfterFailure(ctx, id)
			s.sandboxes.remove(id)
			return nil, err
		}
	}
	if s.opts.HairpinVeth && !s.net.Namespaced() && cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		s.enableHairpin(ctx, id)
	}
	s.log.WithFields(map[string]any{"id": id, "pod": cfg.Metadata.Namespace + "/" + cfg.Metadata.Name, "handler": rt.Handler, "docker_runtime": rt.DockerRuntime}).Info("pod sandbox running")
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return invalidf("pod sandbox config is required")
	}
	m := cfg.GetMetadata()
	if m == nil {
		return invalidf("pod sandbox config: metadata is required")
	}
	if err := checkNameComponent("pod sandbox metadata.name", m.Name, true); err != nil {
		return err
	}
	if err := checkNameComponent("pod sandbox metadata.namespace", m.Namespace, true); err != nil {
		return err
	}
	if err := checkNameComponent("pod sandbox metadata.uid", m.Uid, false); err != nil {
		return err
	}
	if err := checkCRILabels("pod sandbox", cfg.Labels); err != nil { // reserved label keys: a pod cannot set the labels that steer us
		return err
	}
	if err := validateSandboxSettings(cfg); err != nil {
		return err
	}
	for _, pm := range cfg.PortMappings {
		if pm.ContainerPort <= 0 || pm.ContainerPort > 65535 || pm.HostPort < 0 || pm.HostPort > 65535 {
			return invalidf("pod sandbox port mapping %d->%d: ports must be within 1-65535", pm.HostPort, pm.ContainerPort)
		}
	}
	return nil
}

// sandboxDockerConfig is the Docker configuration of a pod's sandbox container. A sandbox that
// the network plugin attaches (namespaced) gets an empty network namespace (NetworkMode none):
// its port mappings are the plugin's; Docker still writes its hostname and resolv.conf.
func (s *Service) sandboxDockerConfig(cfg *runtimeapi.PodSandboxConfig, rt podRuntime, namespaced bool) (*container.Config, *container.HostConfig, error) {
	labels := makeLabels(cfg.Labels, cfg.Annotations)
	labels[containerTypeLabel] = containerTypeSandbox
	labels[handlerLabel] = rt.Handler
	labels[dockerRuntimeLabel] = rt.DockerRuntime

	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	hostNetwork := nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE

	containerCfg := &container.Config{
		Image:  s.opts.PodInfraImage,
		Labels: labels,
	}
	hostCfg := &container.HostConfig{
		Runtime:     rt.DockerRuntime,
		OomScoreAdj: s.oomScoreAdj(sandboxOOMScoreAdj),
		// Containers of the pod join the sandbox's IPC namespace: Docker requires it shareable.
		IpcMode: container.IPCModeShareable,
		// The sandbox runs no workload; keep Docker's restart policy out of the kubelet's way.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	hostCfg.CgroupParent = cfg.GetLinux().GetCgroupParent()
	// Namespaced sysctls (IPC, network) set on the sandbox hold for every container that
	// joins its namespaces.
	hostCfg.Sysctls = cfg.GetLinux().GetSysctls()
	// Pod identity, resources and overhead for VM-based runtimes (Engine API >= 1.43).
	hostCfg.Annotations = s.sandboxAnnotations(cfg)
	if err := applySandboxSecurity(containerCfg, hostCfg, cfg.GetLinux().GetSecurityContext()); err != nil {
		return nil, nil, err
	}
	// The pod's containers join the sandbox's IPC namespace and so its /dev/shm.
	hostCfg.ShmSize, _ = sandboxShmSize(cfg) // validated with the request
	if nsOpts.GetIpc() == runtimeapi.NamespaceMode_NODE {
		hostCfg.IpcMode = "host"
		if hostCfg.ShmSize > 0 {
			s.log.Warnf("pod %s/%s: a /dev/shm size annotation has no effect with host IPC (the pod uses the node's /dev/shm)", cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName())
			hostCfg.ShmSize = 0
		}
	}
	if nsOpts.GetPid() == runtimeapi.NamespaceMode_NODE {
		hostCfg.PidMode = "host"
	}
	switch {
	case hostNetwork:
		hostCfg.NetworkMode = "host"
	case namespaced:
		hostCfg.NetworkMode = "none"
	default:
		hostCfg.NetworkMode = "default"
		exposed, bindings := portBindings(cfg.PortMappings)
		containerCfg.ExposedPorts, hostCfg.PortBindings = exposed, bindings
	}
	if !hostNetwork {
		// Docker refuses a hostname together with the host network.
		containerCfg.Hostname = cfg.Hostname
	}
	// Docker writes the sandbox's resolv.conf from these in every network mode (none and host
	// too: ClusterFirstWithHostNet), and the pod's containers share the file.
	if dns := cfg.GetDnsConfig(); dns != nil {
		hostCfg.DNS, hostCfg.DNSSearch, hostCfg.DNSOptions = dns.Servers, dns.Searches, dns.Options
	}
	return containerCfg, hostCfg, nil
}

// portBindings publishes the pod's port mappings on Docker's bridge.
func portBindings(mappings []*runtimeapi.PortMapping) (nat.PortSet, nat.PortMap) {
	if len(mappings) == 0 {
		return nil, nil
	}
	exposed, bindings := nat.PortSet{}, nat.PortMap{}
	for _, pm := range mappings {
		proto := "tcp"
		switch pm.Protocol {
		case runtimeapi.Protocol_UDP:
			proto = "udp"
		case runtimeapi.Protocol_SCTP:
			proto = "sctp"
		}
		port := nat.Port(strconv.Itoa(int(pm.ContainerPort)) + "/" + proto)
		exposed[port] = struct{}{}
		if pm.HostPort == 0 {
			continue
		}
		bindings[port] = append(bindings[port], nat.PortBinding{HostIP: pm.HostIp, HostPort: strconv.Itoa(int(pm.HostPort))})
	}
	return exposed, bindings
}

// createContainer creates a container, retrying once with a randomised name when the name is
// taken (a container Docker has not finished removing, or a leftover of a crash). Docker goes on
// creating when the caller gives up, and its answer is the only news of the new ID: so the
// create runs to its end under libdocker's own bound, and what it made for a caller that has
// gone is removed.
func (s *Service) createContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	createCtx := context.WithoutCancel(ctx)
	id, err := s.docker.CreateContainer(createCtx, name, cfg, hc)
	if libdocker.IsConflict(err) && ctx.Err() == nil {
		s.log.WithField("name", name).Warnf("container name in use, creating with a random suffix: %v", err)
		id, err = s.docker.CreateContainer(createCtx, randomizeName(name), cfg, hc)
	}
	if err == nil && ctx.Err() != nil {
		s.removeAfterFailure(ctx, id)
		return "", fmt.Errorf("create container %q: the caller gave up: %w", name, ctx.Err())
	}
	return id, err
}

// removeAfterFailure removes a container a failed RPC created, whatever the caller's context.
func (s *Service) removeAfterFailure(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.docker.RemoveContainer(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !libdocker.IsNotFound(err) {
		s.log.WithField("id", id).Errorf("remove container after a failed call: %v", err)
	}
}

// A start that fails inside the runtime can leave the runtime running. gVisor's `runsc create`
// starts the sandbox and its gofer; when `runsc start` then fails, containerd keeps the task
// "created" under its shim. Docker 20.10 deletes the task without a kill, which containerd
// refuses for a created task; Docker 29 kills it first, which runsc (20221219) refuses for a
// created container. docker kill and stop refuse a container that is not running, and docker
// rm drops only Docker's record: the shim and the runtime's processes stay for ever, one set per
// retry of the kubelet. What reclaims them is the end of the shim: containerd cleans up after a
// dead shim by running the shim's delete command, which runs the runtime's `delete --force`.
// So after such a failure, the shim that serves this container alone (its -id is the
// container's; a shim that Docker 29 shares among a pod's containers, by their sandbox-id
// annotation, has the sandbox's) is killed, and the call waits until it and what it ran are gone.

// reclaimTimeout bounds the wait for containerd's cleanup after the shim is killed.
const reclaimTimeout = 10 * time.Second

// reclaimFailedStart ends the shim of container id and the runtime processes under it after
// a start that failed inside the runtime (libdocker.ErrRuntimeFailed). It needs the host's
// /proc (cri-dockerd in the host's PID namespace, as a node service runs); where it sees no
// shim of the container, it does nothing.
func (s *Service) reclaimFailedStart(ctx context.Context, id string, startErr error) {
	if !errors.Is(startErr, libdocker.ErrRuntimeFailed) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reclaimTimeout)
	defer cancel()
	log := s.log.WithField("id", id)
	start := time.Now()
	ended, err := reclaimShim(ctx, "/proc", id, unix.Kill)
	switch {
	case err != nil:
		log.Warnf("end the runtime's processes a failed start left: %v", err)
	case ended > 0:
		log.Infof("ended the containerd shim and %d runtime processes a failed start left running (containerd's cleanup took %v)", ended-1, time.Since(start).Round(time.Millisecond))
	}
}

// reclaimShim kills the containerd shim whose -id is id and waits until it, every process
// that descended from it and containerd's cleanup (the shim's delete command and the runtime's
// delete, which name the container) are gone. Processes of the shim's tree still there when
// ctx ends (containerd's cleanup did not come) are killed directly. It returns how many
// processes of the shim's tree ended.
func reclaimShim(ctx context.Context, procRoot, id string, kill func(pid int, sig unix.Signal) error) (int, error) {
	procs := readProcesses(procRoot)
	shim, ok := shimOf(procs, id)
	if !ok {
		return 0, nil
	}
	tree := append([]process{shim}, descendants(procs, shim.pid)...)
	if err := kill(shim.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return 0, fmt.Errorf("kill shim %d: %w", shim.pid, err)
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		procs = readProcesses(procRoot)
		alive := stillRunning(procs, tree)
		cleanup := naming(procs, id)
		if len(alive) == 0 && len(cleanup) == 0 {
			return len(tree), nil
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		if len(alive) == 0 {
			return len(tree), fmt.Errorf("containerd's cleanup after the shim %d of %.12s still runs (%s)", shim.pid, id, pidList(cleanup))
		}
		for _, p := range alive {
			_ = kill(p.pid, unix.SIGKILL)
		}
		return len(tree), fmt.Errorf("containerd did not clean up after the shim %d of %.12s: killed %s", shim.pid, id, pidList(alive))
	}
}

// naming lists the running processes whose command line names container id: the shim's
// delete command and the runtime's delete that containerd runs after a dead shim.
func naming(procs map[int]process, id string) []process {
	var out []process
	for _, p := range procs {
		if p.state == 'Z' || p.pid == os.Getpid() {
			continue
		}
		for _, a := range p.args {
			if strings.Contains(a, id) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func pidList(procs []process) string {
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = strconv.Itoa(p.pid)
	}
	return strings.Join(pids, ", ")
}

// process is one process of the host, from /proc/PID/stat and cmdline.
type process struct {
	pid, ppid int
	state     byte
	start     uint64 // clock ticks after boot: with the PID, the process's identity
	args      []string
}

// readProcesses reads every process under procRoot; one that ends meanwhile is left out.
func readProcesses(procRoot string) map[int]process {
	entries, _ := os.ReadDir(procRoot)
	procs := make(map[int]process, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProcess(filepath.Join(procRoot, e.Name()))
		if ok {
			p.pid = pid
			procs[pid] = p
		}
	}
	return procs
}

func readProcess(dir string) (process, bool) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return process{}, false
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
	// stime cutime cstime priority nice threads itrealvalue starttime ...: comm may hold
	// spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return process{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return process{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return process{}, false
	}
	p := process{ppid: ppid, state: f[0][0], start: start}
	if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(cmdline) > 0 {
		p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return p, true
}

// shimOf finds the running containerd shim (containerd-shim-runc-v2, -runsc-v1, -kata-v2...)
// started for container id alone: its -id argument is id.
func shimOf(procs map[int]process, id string) (process, bool) {
	for _, p := range procs {
		if p.state == 'Z' || len(p.args) == 0 || !strings.HasPrefix(filepath.Base(p.args[0]), "containerd-shim") {
			continue
		}
		for i, a := range p.args {
			flagThenID := (a == "-id" || a == "--id") && i+1 < len(p.args) && p.args[i+1] == id
			if flagThenID || a == "-id="+id || a == "--id="+id {
				return p, true
			}
		}
	}
	return process{}, false
}

// descendants lists every process under pid (the shim is its processes' subreaper, so they
// stay its children however they were started).
func descendants(procs map[int]process, pid int) []process {
	children := map[int][]process{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []process
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// stillRunning lists the processes of tree that still run: the same PID and start time, and
// not a zombie (a dead process whose parent has not reaped it runs nothing).
func stillRunning(now map[int]process, tree []process) []process {
	var alive []process
	for _, p := range tree {
		if q, ok := now[p.pid]; ok && q.start == p.start && q.state != 'Z' {
			alive = append(alive, p)
		}
	}
	return alive
}

// ensureImage pulls ref when Docker does not have it.
func (s *Service) ensureImage(ctx context.Context, ref string) error {
	_, err := s.docker.InspectImage(ctx, ref)
	if err == nil || !libdocker.IsNotFound(err) {
		return err
	}
	s.log.WithField("image", ref).Info("pulling image")
	return s.docker.PullImage(ctx, ref, registry.AuthConfig{}, s.opts.ImagePullProgressDeadline)
}

// enableHairpin turns hairpin on for the pod's port on Docker's bridge (--hairpin-mode). A pod
// that cannot reach itself through a service is less harm than no pod: a failure is a warning.
func (s *Service) enableHairpin(ctx context.Context, id string) {
	_, pid, err := s.runningNetNS(ctx, id)
	if err == nil {
		err = s.opts.hairpin(pid)
	}
	if err != nil {
		s.log.WithField("id", id).Warnf("--hairpin-mode: %v", err)
	}
}
