package core

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostMounts turns the CRI's host-path mounts into Docker mounts of type bind, with
// containerd's semantics on every engine:
//
//	readonly  recursive_read_only  what the container gets
//	false     false                rbind, read-write, the propagation asked
//	true      false                rbind, only the mount itself read-only (submounts keep theirs)
//	true      true                 rbind, read-only all the way down; private propagation only
//	false     true                 refused
//
// Paths go as they are: a bind spec (host:ctr[:options]) would read options out of a path, so
// that a container_path "/x:rshared" became a bidirectional mount at /x and "/x:Z" relabelled
// the host directory. Only SELinux relabel needs a bind spec (Docker has no mount option for
// it): where SELinux is on, a relabelled mount is one, and its paths may not hold a ':'; where
// it is off, relabel is a no-op, as in containerd. A relabelled read-only bind spec is made
// recursively read-only from Engine API 1.44 (said once). Image volumes are internal/imagevolume's.
func (s *Service) hostMounts(ctx context.Context, mounts []*runtimeapi.Mount) ([]string, []mount.Mount, error) {
	engine := s.engine()
	selinux := false
	for _, m := range mounts {
		if m.SelinuxRelabel && m.GetImage().GetImage() == "" {
			selinux = s.selinuxEnabled(ctx)
			break
		}
	}
	var binds []string
	var out []mount.Mount
	for _, m := range mounts {
		if len(m.UidMappings) > 0 || len(m.GidMappings) > 0 {
			return nil, nil, status.Errorf(codes.Unimplemented, "mount %q -> %q: idmapped mounts need a user namespace per pod, which Docker cannot give", m.HostPath, m.ContainerPath)
		}
		if err := checkMountPropagation(m); err != nil {
			return nil, nil, err
		}
		if m.GetImage().GetImage() != "" {
			continue
		}
		relabel := m.SelinuxRelabel && selinux
		switch {
		case m.RecursiveReadOnly:
			rro, err := recursiveReadOnlyMount(m, engine, relabel)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, rro)
		case relabel:
			bind, err := relabelBindSpec(m)
			if err != nil {
				return nil, nil, err
			}
			if m.Readonly && engine.readOnlyModes {
				s.warnOnce("rro-selinux", "Docker Engine API %s makes read-only binds recursively read-only and cannot relabel a mount for SELinux otherwise: read-only mounts with SELinux relabel are read-only all the way down on this node", engine.apiVersion)
			}
			binds = append(binds, bind)
		default:
			out = append(out, bindMount(m, engine))
		}
	}
	return binds, out, nil
}

// bindMount is a host path mounted as the CRI asks. CreateMountpoint has Docker (API 1.42+)
// create a host path that went missing after createMissingHostPaths; older engines ignore it.
func bindMount(m *runtimeapi.Mount, engine engineFeatures) mount.Mount {
	opts := &mount.BindOptions{Propagation: dockerPropagation(m.Propagation), CreateMountpoint: true}
	// From API 1.44 a read-only bind is recursively read-only unless it says otherwise; before,
	// it is read-only at the top only (and the field does not exist).
	opts.ReadOnlyNonRecursive = m.Readonly && engine.readOnlyModes
	return mount.Mount{Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: m.Readonly, BindOptions: opts}
}

// recursiveReadOnlyMount is a mount read-only all the way down, which a bind spec cannot say.
// As containerd: it makes sense only for a read-only, private mount.
func recursiveReadOnlyMount(m *runtimeapi.Mount, engine engineFeatures, relabel bool) (mount.Mount, error) {
	switch {
	case !m.Readonly:
		return mount.Mount{}, invalidf("mount %q -> %q: recursive_read_only needs readonly", m.HostPath, m.ContainerPath)
	case m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		return mount.Mount{}, invalidf("mount %q -> %q: recursive_read_only needs private propagation, not %s", m.HostPath, m.ContainerPath, m.Propagation)
	case !engine.readOnlyModes:
		return mount.Mount{}, status.Errorf(codes.Unimplemented, "mount %q -> %q: recursive read-only mounts need Docker 25 (Engine API %s); this Docker speaks %s", m.HostPath, m.ContainerPath, apiReadOnlyModes, engine.apiVersion)
	case relabel:
		return mount.Mount{}, status.Errorf(codes.Unimplemented, "mount %q -> %q: Docker cannot relabel a recursive read-only mount for SELinux, and SELinux is on", m.HostPath, m.ContainerPath)
	}
	return mount.Mount{
		Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, ReadOnlyForceRecursive: true, CreateMountpoint: true},
	}, nil
}

// relabelBindSpec is a Docker bind spec, host:container:options, the one form in which Docker
// relabels a host path for SELinux. Docker splits the spec at every ':', so a path with one
// would move options into it: refused. (A ',' splits only the options, which come last.)
func relabelBindSpec(m *runtimeapi.Mount) (string, error) {
	for _, p := range []struct{ field, path string }{{"host_path", m.HostPath}, {"container_path", m.ContainerPath}} {
		if strings.Contains(p.path, ":") {
			return "", invalidf("mount %q -> %q: %s %q has a ':', and SELinux relabel needs a Docker bind spec, where ':' separates the paths and options", m.HostPath, m.ContainerPath, p.field, p.path)
		}
	}
	var opts []string
	if m.Readonly {
		opts = append(opts, "ro")
	}
	switch m.Propagation {
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		opts = append(opts, "rslave")
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		opts = append(opts, "rshared")
	}
	opts = append(opts, "Z")
	return m.HostPath + ":" + m.ContainerPath + ":" + strings.Join(opts, ","), nil
}

// createMissingHostPaths makes each host path that does not exist a directory (0755), as
// containerd does before it mounts and Docker did for binds: Docker 20.10 (API 1.41) has no
// CreateMountpoint, and its mounts fail on a missing source. Run once the request is checked,
// so that a refused request leaves no directory behind.
func (s *Service) createMissingHostPaths(mounts []*runtimeapi.Mount) error {
	for _, m := range mounts {
		if m.HostPath == "" || m.GetImage().GetImage() != "" {
			continue
		}
		_, err := os.Stat(m.HostPath)
		if err == nil {
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = s.makeHostDir(m.HostPath)
		}
		if err != nil {
			return status.Errorf(codes.FailedPrecondition, "mount %q -> %q: host_path: %v", m.HostPath, m.ContainerPath, err)
		}
	}
	return nil
}

// makeHostDir creates a missing host path; unit tests keep it inside their own directories.
func (s *Service) makeHostDir(path string) error {
	if s.hostDirMaker != nil {
		return s.hostDirMaker(path)
	}
	return mkdirHostPath(path)
}

// mkdirHostPath creates a host path as containerd does: a directory, 0755, with its parents.
func mkdirHostPath(path string) error {
	return os.MkdirAll(path, 0o755)
}

func dockerPropagation(p runtimeapi.MountPropagation) mount.Propagation {
	switch p {
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		return mount.PropagationRSlave
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		return mount.PropagationRShared
	}
	return mount.PropagationRPrivate
}

// selinuxEnabled reports whether Docker runs with SELinux (its security options say so).
func (s *Service) selinuxEnabled(ctx context.Context) bool {
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return true // unknown: keep the relabel, which is what the pod asked for
	}
	for _, opt := range info.SecurityOptions {
		if opt == "name=selinux" {
			return true
		}
	}
	return false
}

// recursiveReadOnlySupported reports whether the node can make mounts read-only recursively
// with the Docker runtime dockerRuntime ("" is Docker's default): Docker 25, a kernel with
// mount_setattr, and a runtime whose OCI features (in Docker's /info) list "rro"; for a runtime
// without them, runc's known support.
func recursiveReadOnlySupported(info *dockerInfo, dockerRuntime string) bool {
	if !featuresOf(info.APIVersion).readOnlyModes || !kernelAtLeast(info.KernelVersion, 5, 12) {
		return false
	}
	if dockerRuntime == "" {
		dockerRuntime = info.DefaultRuntime
	}
	if options, ok := ociMountOptions(info, dockerRuntime); ok {
		return slices.Contains(options, "rro")
	}
	// No features reported (Docker before 25, a shim v2 runtime, a runtime without a
	// `features` command): runc is known to make them, others are not.
	return dockerRuntime == "runc" || dockerRuntime == "io.containerd.runc.v2"
}

// OCIFeaturesKey is where Docker (25+) puts, in /info's runtime status, the OCI features it
// read from the runtime's binary (`RUNTIME features`).
const OCIFeaturesKey = "org.opencontainers.runtime-spec.features"

// ociMountOptions are the mount options Docker says runtime's binary supports; false when
// Docker reports no features for it, or features it cannot read.
func ociMountOptions(info *dockerInfo, runtime string) ([]string, bool) {
	raw := info.Runtimes[runtime].Status[OCIFeaturesKey]
	if raw == "" {
		return nil, false
	}
	var features struct {
		MountOptions []string `json:"mountOptions"`
	}
	if err := json.Unmarshal([]byte(raw), &features); err != nil {
		return nil, false
	}
	return features.MountOptions, true
}

// kernelAtLeast compares a kernel release such as "6.1.0-18-amd64" with major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && min >= minor)
}
