package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
)

// CreateContainer creates a container in a pod sandbox, on the sandbox's runtime: every
// container of a pod runs on the runtime its RuntimeClass handler chose for the sandbox, taken
// from the in-memory sandbox index (rebuilt from sandbox labels at start), not from an Inspect.
func (s *Service) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg, sandboxCfg := req.GetConfig(), req.GetSandboxConfig()
	if req.GetPodSandboxId() == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if err := validateContainerConfig(cfg); err != nil {
		return nil, err
	}
	if sandboxCfg.GetMetadata() == nil {
		return nil, invalidf("sandbox_config with metadata is required: the container's name is made from it")
	}
	if err := validateSandboxConfig(sandboxCfg); err != nil {
		return nil, err
	}
	logPath, err := containerLogPath(sandboxCfg.LogDirectory, cfg.LogPath)
	if err != nil {
		return nil, err
	}
	if logPath != "" {
		if err := s.checkLogDirectory(sandboxCfg.LogDirectory); err != nil {
			return nil, err
		}
	}
	sandboxID, rt, found, err := s.lookupSandboxFor(ctx, req.GetPodSandboxId(), sandboxCfg)
	if err != nil {
		return nil, dockerError(err, "look up pod sandbox %q", req.GetPodSandboxId())
	}
	if !found {
		return nil, notFoundf("pod sandbox %q not found", req.GetPodSandboxId())
	}
	// What Docker's events said of the sandbox: Docker itself would create the container (a
	// container: network mode is not checked before start) and leave it with no pod.
	if s.nriPending.has(sandboxID) {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %q is not ready: an NRI plugin's RunPodSandbox hook is running", sandboxID)
	}
	switch s.sandboxes.ended(sandboxID) {
	case sandboxRemoved:
		return nil, notFoundf("pod sandbox %q not found: its container was removed", sandboxID)
	case sandboxExited:
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %q is not running: a stopped pod takes no new containers", sandboxID)
	}

	pod, err := s.sandboxSettings(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	s.logSettingsDisagreement(ctx, sandboxID, pod, sandboxCfg)
	containerCfg, hostCfg, err := s.containerDockerConfig(ctx, sandboxID, rt, pod, cfg, sandboxCfg, logPath)
	if err != nil {
		return nil, err
	}
	if err := s.createMissingHostPaths(cfg.Mounts); err != nil {
		return nil, err
	}
	name := makeContainerName(sandboxCfg.Metadata, cfg.Metadata)
	vols, err := s.imageVolumes.Prepare(ctx, name, cfg.Mounts, containerCfg, hostCfg)
	if err != nil {
		return nil, err
	}
	nri := s.nriActive()
	if nri {
		// A plugin that connects now is given this container once plugins heard of it.
		defer s.nri.BlockSync()()
	}
	id, err := s.createContainer(ctx, name, containerCfg, hostCfg)
	if err != nil {
		vols.Release()
		return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("create container %q", name), rt)
	}
	if nri {
		if id, err = s.nriCreateContainer(ctx, id, name, containerCfg, hostCfg); err != nil {
			vols.Release()
			return nil, err
		}
	}
	if err := vols.Check(ctx, id); err != nil {
		if nri {
			s.nriUndoCreate(ctx, id)
		} else {
			s.removeAfterFailure(ctx, id)
		}
		vols.Release()
		return nil, err
	}
	vols.Commit(id)
	if nri {
		s.nriPostCreate(ctx, id)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func validateContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	if cfg == nil {
		return invalidf("container config is required")
	}
	if cfg.GetMetadata() == nil {
		return invalidf("container config: metadata is required")
	}
	if err := checkNameComponent("container metadata.name", cfg.Metadata.Name, true); err != nil {
		return err
	}
	if cfg.GetImage().GetImage() == "" {
		return invalidf("container config: image is required")
	}
	if err := checkCRILabels("container", cfg.Labels); err != nil {
		return err
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		return invalidf("container config: run_as_group needs run_as_user or run_as_username")
	}
	targets := map[string]string{} // cleaned container path -> as the request wrote it
	for _, m := range cfg.Mounts {
		// Docker takes one mount per target, as it cleans it.
		if m.ContainerPath != "" {
			target := filepath.Clean(m.ContainerPath)
			if first, ok := targets[target]; ok {
				return invalidf("mounts %q and %q: two mounts at container_path %q, and Docker takes one mount per path", first, m.ContainerPath, target)
			}
			targets[target] = m.ContainerPath
		}
		if len(m.MountOptions) > 0 {
			// Docker's bind mounts take ro, propagation and SELinux relabelling only (Status says
			// features.mount_options false).
			return invalidf("mount %q -> %q: mount option %q: %s", m.HostPath, m.ContainerPath, m.MountOptions[0], mountOptionsRefusal)
		}
		if m.GetImage().GetImage() != "" {
			if err := imagevolume.ValidateMount(m); err != nil {
				return err
			}
			continue
		}
		if m.ContainerPath == "" || !filepath.IsAbs(m.ContainerPath) {
			return invalidf("mount %q -> %q: container_path must be an absolute path", m.HostPath, m.ContainerPath)
		}
		if m.HostPath == "" {
			return invalidf("mount -> %q: host_path is required", m.ContainerPath)
		}
		if !filepath.IsAbs(m.HostPath) {
			// Docker would take it for the name of a volume of its own.
			return invalidf("mount %q -> %q: host_path must be an absolute path", m.HostPath, m.ContainerPath)
		}
	}
	for _, kv := range cfg.Envs {
		if kv.Key == "" {
			return invalidf("container config: an environment variable has no name")
		}
	}
	return nil
}

// containerDockerConfig is the Docker configuration of a container in sandbox sandboxID, whose
// pod-level settings (namespaces, privileged, cgroup parent) are pod's, not sandboxCfg's.
// logPath is the checked path of its log file ("" for none): see containerLogPath.
func (s *Service) containerDockerConfig(ctx context.Context, sandboxID string, rt podRuntime, pod podSettings, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig, logPath string) (*container.Config, *container.HostConfig, error) {
	labels := makeLabels(cfg.Labels, cfg.Annotations)
	// Every key of ours first, empty: what follows (and imagevolume's Prepare) sets those in use.
	reserveLabels(labels)
	labels[containerTypeLabel] = containerTypeContainer
	labels[sandboxIDLabel] = sandboxID
	if logPath != "" {
		labels[containerLogPathLabel] = logPath
		labels[logDirectoryLabel] = filepath.Clean(sandboxCfg.LogDirectory)
		labels[logLabel] = logCRI
		if cfg.Tty {
			labels[logLabel] = logCRIWithT
		}
	}
	if user := cfg.Image.UserSpecifiedImage; user != "" && user != cfg.Image.Image {
		labels[userImageLabel] = user
	}
	env := make([]string, 0, len(cfg.Envs))
	for _, kv := range cfg.Envs {
		env = append(env, kv.Key+"="+string(kv.Value))
	}
	containerCfg := &container.Config{
		Image:      cfg.Image.Image,
		Entrypoint: strslice.StrSlice(cfg.Command),
		Cmd:        strslice.StrSlice(cfg.Args),
		Env:        env,
		WorkingDir: cfg.WorkingDir,
		Labels:     labels,
		Tty:        cfg.Tty,
		OpenStdin:  cfg.Stdin,
		StdinOnce:  cfg.StdinOnce,
	}
	var err error
	if containerCfg.StopSignal, err = dockerStopSignal(cfg.StopSignal); err != nil {
		return nil, nil, err
	}
	binds, mounts, err := s.hostMounts(ctx, cfg.Mounts)
	if err != nil {
		return nil, nil, err
	}
	hostCfg := &container.HostConfig{Runtime: rt.DockerRuntime, Binds: binds, Mounts: mounts}
	if err := s.applyNamespaces(ctx, hostCfg, sandboxID, pod, cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); err != nil {
		return nil, nil, err
	}
	hostCfg.CgroupParent = pod.cgroupParent
	files, err := s.applyResources(hostCfg, cfg.GetLinux().GetResources())
	if err != nil {
		return nil, nil, err
	}
	if err := s.labelCgroupV2(labels, files); err != nil {
		return nil, nil, err
	}
	if err := s.applyDevices(hostCfg, cfg.Devices, cfg.CDIDevices); err != nil {
		return nil, nil, err
	}
	s.applyContainerAnnotations(ctx, hostCfg, sandboxID, cfg, sandboxCfg)
	s.applyLogLimit(ctx, hostCfg, sandboxID)
	if err := s.applySecurityContext(ctx, containerCfg, hostCfg, cfg.GetLinux().GetSecurityContext(), s.sandboxPrivileged(pod, sandboxCfg), rt); err != nil {
		return nil, nil, err
	}
	return containerCfg, hostCfg, nil
}

// containerLogPath is where a container's output goes: the sandbox's log_directory joined with
// the container's log_path; "" when log_path is empty (no log file).
// The directory must be absolute and clean, the path a clean relative path that names a file
// inside it: a request cannot make us create or write a file anywhere else (docs/security.md).
// Nothing is created here; the follower creates the file when the container starts.
func containerLogPath(dir, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	if !filepath.IsLocal(path) || filepath.Clean(path) == "." {
		return "", invalidf("container log_path %q must be a relative path to a file inside the pod's log_directory, without '..' components", path)
	}
	if dir == "" {
		return "", invalidf("container log_path %q needs the pod sandbox's log_directory: without it the output would have nowhere to go", path)
	}
	if !filepath.IsAbs(dir) || hasDotComponent(dir) {
		return "", invalidf("pod sandbox log_directory %q must be an absolute path without '.' or '..' components", dir)
	}
	return filepath.Join(dir, path), nil
}

// hasDotComponent says whether a slash-separated path has a "." or ".." component.
func hasDotComponent(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == ".." || c == "." {
			return true
		}
	}
	return false
}

// checkLogDirectory fails with FailedPrecondition when the pod's log directory is not there:
// the kubelet creates it before the pod's containers, and we never create it or its parents,
// so without it the container's output would be lost.
func (s *Service) checkLogDirectory(dir string) error {
	if s.logDirectoryExists != nil {
		return s.logDirectoryExists(dir)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return status.Errorf(codes.FailedPrecondition, "pod sandbox log_directory %q does not exist: the kubelet creates it before the pod's containers, and cri-dockerd does not", dir)
	case err != nil:
		return status.Errorf(codes.FailedPrecondition, "pod sandbox log_directory %q: %v", dir, err)
	case !fi.IsDir():
		return status.Errorf(codes.FailedPrecondition, "pod sandbox log_directory %q is not a directory", dir)
	}
	return nil
}
