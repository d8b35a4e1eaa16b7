package core

import (
	"context"
	"fmt"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/go-connections/nat"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/core/startgate"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

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

	containerCfg, hostCfg, err := s.sandboxDockerConfig(ctx, cfg, rt, att != nil)
	if err != nil {
		return nil, err
	}
	name := makeSandboxName(cfg.Metadata)
	id, err := s.createContainer(ctx, name, containerCfg, hostCfg)
	if err != nil {
		return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("create sandbox %q", name), rt)
	}
	s.sandboxes.put(id, rt)
	rec := recordOfConfig(cfg, rt)
	pod := settingsOf(hostCfg, containerCfg.Labels)
	rec.pod = &pod
	s.sandboxes.remember(id, rec)

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
	if err := s.nriRunPodSandbox(ctx, id); err != nil {
		return nil, err
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
func (s *Service) sandboxDockerConfig(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, rt podRuntime, namespaced bool) (*container.Config, *container.HostConfig, error) {
	labels := makeLabels(cfg.Labels, cfg.Annotations)
	reserveLabels(labels) // the pod infra image's labels must not fill our keys either
	labels[containerTypeLabel] = containerTypeSandbox
	labels[handlerLabel] = rt.Handler
	labels[dockerRuntimeLabel] = rt.DockerRuntime
	labels[privilegedPodLabel] = strconv.FormatBool(cfg.GetLinux().GetSecurityContext().GetPrivileged())

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
	parent, err := s.dockerCgroupParent(ctx, cfg.GetLinux().GetCgroupParent())
	if err != nil {
		return nil, nil, err
	}
	hostCfg.CgroupParent = parent
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
