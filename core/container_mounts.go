package core

import (
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// apiRecursiveReadOnly is the first Engine API (Docker 25) with bind mounts that are read-only
// all the way down (BindOptions.ReadOnlyForceRecursive); the kernel needs mount_setattr (5.12).
const apiRecursiveReadOnly = "1.44"

// recursiveReadOnlyMounts gives Docker the mounts that must be read-only recursively (their
// submounts too), which a bind spec string cannot say, and refuses mount options Docker cannot
// honour rather than ignore them. The other host-path mounts are binds (see binds).
func (s *Service) recursiveReadOnlyMounts(mounts []*runtimeapi.Mount) ([]mount.Mount, error) {
	var out []mount.Mount
	for _, m := range mounts {
		if len(m.UidMappings) > 0 || len(m.GidMappings) > 0 {
			return nil, status.Errorf(codes.Unimplemented, "mount %q -> %q: idmapped mounts need a user namespace per pod, which Docker cannot give", m.HostPath, m.ContainerPath)
		}
		if !m.RecursiveReadOnly || m.GetImage().GetImage() != "" {
			continue
		}
		// As containerd: recursive read-only makes sense only for a read-only, private mount.
		if !m.Readonly {
			return nil, invalidf("mount %q -> %q: recursive_read_only needs readonly", m.HostPath, m.ContainerPath)
		}
		if m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
			return nil, invalidf("mount %q -> %q: recursive_read_only needs private propagation, not %s", m.HostPath, m.ContainerPath, m.Propagation)
		}
		if v := s.docker.APIVersion(); versions.LessThan(v, apiRecursiveReadOnly) {
			return nil, status.Errorf(codes.Unimplemented, "mount %q -> %q: recursive read-only mounts need Docker 25 (Engine API %s); this Docker speaks %s", m.HostPath, m.ContainerPath, apiRecursiveReadOnly, v)
		}
		if m.SelinuxRelabel {
			return nil, status.Errorf(codes.Unimplemented, "mount %q -> %q: Docker cannot relabel a recursive read-only mount for SELinux", m.HostPath, m.ContainerPath)
		}
		out = append(out, mount.Mount{
			Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, ReadOnlyForceRecursive: true},
		})
	}
	return out, nil
}

// recursiveReadOnlySupported reports whether the node can make mounts read-only recursively
// with the Docker runtime dockerRuntime ("" is Docker's default): Docker 25, a kernel with
// mount_setattr, and runc, whose support is known (other runtimes report nothing to Docker).
func recursiveReadOnlySupported(info *dockerInfo, dockerRuntime string) bool {
	if versions.LessThan(info.APIVersion, apiRecursiveReadOnly) || !kernelAtLeast(info.KernelVersion, 5, 12) {
		return false
	}
	if dockerRuntime == "" {
		dockerRuntime = info.DefaultRuntime
	}
	return dockerRuntime == "runc" || dockerRuntime == "io.containerd.runc.v2"
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
