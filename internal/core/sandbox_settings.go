package core

import (
	"context"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// privilegedPodLabel says on a sandbox container whether its pod may run privileged containers
// ("true" or "false"). Docker's HostConfig cannot say it: the pause container itself stays
// unprivileged (applySandboxSecurity).
const privilegedPodLabel = ourLabelPrefix + "privileged-pod"

// podSettings are the pod-level settings of a sandbox as it was created. CreateContainer takes
// them from here, never from the request's sandbox_config, as containerd takes them from its
// sandbox store: a request cannot give a container more than its pod was given.
type podSettings struct {
	hostNetwork, hostIPC, hostPID bool
	// privileged: the pod may run privileged containers. privilegedKnown is false for a
	// sandbox of ours made before privilegedPodLabel existed.
	privileged, privilegedKnown bool
	// cgroupParent is the sandbox's, as Docker took it (dockerCgroupParent).
	cgroupParent string
}

// settingsOf reads the pod-level settings from a sandbox container's Docker configuration.
func settingsOf(hc *container.HostConfig, labels map[string]string) podSettings {
	p := podSettings{
		hostNetwork:  hc.NetworkMode.IsHost(),
		hostIPC:      hc.IpcMode.IsHost(),
		hostPID:      hc.PidMode.IsHost(),
		cgroupParent: hc.CgroupParent,
	}
	_, ours := labels[handlerLabel]
	if v, ok := labels[privilegedPodLabel]; ok {
		p.privileged, p.privilegedKnown = v == "true", true
	} else if !ours {
		// Upstream cri-dockerd (dockershim) made the pause container of a privileged pod
		// privileged itself.
		p.privileged, p.privilegedKnown = hc.Privileged, true
	}
	return p
}

// sandboxSettings are the settings of sandbox id: remembered by RunPodSandbox and
// PodSandboxStatus; else (after a restart) read with one inspect, served from the container
// store when it is synced, and remembered.
func (s *Service) sandboxSettings(ctx context.Context, id string) (podSettings, error) {
	if rec, ok := s.sandboxes.record(id); ok && rec.pod != nil {
		return *rec.pod, nil
	}
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return podSettings{}, notFoundf("pod sandbox %q not found", id)
		}
		return podSettings{}, dockerError(err, "inspect pod sandbox %q", id)
	}
	if c.ContainerJSONBase == nil || c.HostConfig == nil || c.Config == nil {
		return podSettings{}, notFoundf("pod sandbox %q: Docker reports no configuration", id)
	}
	p := settingsOf(c.HostConfig, c.Config.Labels)
	s.sandboxes.rememberSettings(id, p)
	return p, nil
}

// sandboxPrivileged says whether pod may run privileged containers. Only for a sandbox of ours
// made before privilegedPodLabel is the request's word taken, as it always was.
func (s *Service) sandboxPrivileged(pod podSettings, sandboxCfg *runtimeapi.PodSandboxConfig) bool {
	if !pod.privilegedKnown {
		return sandboxCfg.GetLinux().GetSecurityContext().GetPrivileged()
	}
	return pod.privileged
}

// logSettingsDisagreement says (at debug level) where a request's sandbox_config claims other
// pod-level settings than the sandbox was created with; the sandbox's are used. The comparison
// is skipped unless debug is on: CreateContainer is on the hot path.
func (s *Service) logSettingsDisagreement(ctx context.Context, id string, pod podSettings, cfg *runtimeapi.PodSandboxConfig) {
	if !s.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	sc := cfg.GetLinux().GetSecurityContext()
	ns := sc.GetNamespaceOptions()
	var differ []string
	for _, f := range []struct {
		name         string
		asked, isSet bool
	}{
		{"host network", ns.GetNetwork() == runtimeapi.NamespaceMode_NODE, pod.hostNetwork},
		{"host IPC", ns.GetIpc() == runtimeapi.NamespaceMode_NODE, pod.hostIPC},
		{"host PID", ns.GetPid() == runtimeapi.NamespaceMode_NODE, pod.hostPID},
		{"privileged", sc.GetPrivileged(), s.sandboxPrivileged(pod, cfg)},
	} {
		if f.asked != f.isSet {
			differ = append(differ, f.name+"="+strconv.FormatBool(f.asked))
		}
	}
	parent := cfg.GetLinux().GetCgroupParent()
	if want, err := s.dockerCgroupParent(ctx, parent); err != nil || want != pod.cgroupParent {
		differ = append(differ, "cgroup_parent="+strconv.Quote(parent))
	}
	if len(differ) > 0 {
		s.log.WithField("sandbox", id).Debugf("CreateContainer: sandbox_config says %s, unlike the pod sandbox as it was created: the sandbox's settings are used", strings.Join(differ, ", "))
	}
}
