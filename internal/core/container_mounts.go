package core

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostMounts turns the CRI's host-path mounts into Docker binds (host:ctr[:options]) and
// mounts, with containerd's semantics on every engine:
//
//	readonly  recursive_read_only  what the container gets
//	false     false                rbind, read-write, the propagation asked
//	true      false                rbind, only the mount itself read-only (submounts keep theirs)
//	true      true                 rbind, read-only all the way down; private propagation only
//	false     true                 refused
//
// From Engine API 1.44 a read-only bind spec ("ro") is made recursively read-only, so read-only
// mounts go as mounts with ReadOnlyNonRecursive there. SELinux relabel exists only for binds:
// where SELinux is off (relabel is a no-op, as in containerd) it is not needed; where it is on,
// a relabelled read-only mount stays a bind, and Docker makes it recursive (said once).
// Image volumes are internal/imagevolume's.
func (s *Service) hostMounts(ctx context.Context, mounts []*runtimeapi.Mount) ([]string, []mount.Mount, error) {
	engine := s.engine()
	selinux := false
	for _, m := range mounts {
		if m.SelinuxRelabel && m.Readonly && engine.readOnlyModes {
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
		if m.RecursiveReadOnly {
			rro, err := recursiveReadOnlyMount(m, engine, selinux)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, rro)
			continue
		}
		if m.Readonly && engine.readOnlyModes {
			if !(m.SelinuxRelabel && selinux) {
				out = append(out, mount.Mount{
					Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: true,
					BindOptions: &mount.BindOptions{Propagation: dockerPropagation(m.Propagation), ReadOnlyNonRecursive: true, CreateMountpoint: true},
				})
				continue
			}
			s.warnOnce("rro-selinux", "Docker Engine API %s makes read-only binds recursively read-only and cannot relabel a mount for SELinux otherwise: read-only mounts with SELinux relabel are read-only all the way down on this node", engine.apiVersion)
		}
		binds = append(binds, bindSpec(m))
	}
	return binds, out, nil
}

// recursiveReadOnlyMount is a mount read-only all the way down, which a bind spec cannot say.
// As containerd: it makes sense only for a read-only, private mount.
func recursiveReadOnlyMount(m *runtimeapi.Mount, engine engineFeatures, selinux bool) (mount.Mount, error) {
	switch {
	case !m.Readonly:
		return mount.Mount{}, invalidf("mount %q -> %q: recursive_read_only needs readonly", m.HostPath, m.ContainerPath)
	case m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		return mount.Mount{}, invalidf("mount %q -> %q: recursive_read_only needs private propagation, not %s", m.HostPath, m.ContainerPath, m.Propagation)
	case !engine.readOnlyModes:
		return mount.Mount{}, status.Errorf(codes.Unimplemented, "mount %q -> %q: recursive read-only mounts need Docker 25 (Engine API %s); this Docker speaks %s", m.HostPath, m.ContainerPath, apiReadOnlyModes, engine.apiVersion)
	case m.SelinuxRelabel && selinux:
		return mount.Mount{}, status.Errorf(codes.Unimplemented, "mount %q -> %q: Docker cannot relabel a recursive read-only mount for SELinux, and SELinux is on", m.HostPath, m.ContainerPath)
	}
	return mount.Mount{
		Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, ReadOnlyForceRecursive: true, CreateMountpoint: true},
	}, nil
}

// bindSpec is a Docker bind: host:container[:options].
func bindSpec(m *runtimeapi.Mount) string {
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
	if m.SelinuxRelabel {
		opts = append(opts, "Z")
	}
	bind := m.HostPath + ":" + m.ContainerPath
	if len(opts) > 0 {
		bind += ":" + strings.Join(opts, ",")
	}
	return bind
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
