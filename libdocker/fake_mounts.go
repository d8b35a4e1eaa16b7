package libdocker

import (
	"os"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"
)

// imageMountAPIVersion is the first Engine API version (Docker 28) with mounts of type image.
const imageMountAPIVersion = "1.48"

// mountPoints checks HostConfig.Mounts the way the daemon does at create and returns what
// inspect reports for them: bind sources must exist on the host (unless CreateMountpoint),
// ReadOnlyForceRecursive needs API 1.44, image mounts need API 1.48 and an image Docker has. Binds (the string form) are not emulated. Called with f.mu held.
func (f *Fake) mountPoints(hc *container.HostConfig) ([]container.MountPoint, error) {
	out := []container.MountPoint{}
	if hc == nil {
		return out, nil
	}
	for _, m := range hc.Mounts {
		switch m.Type {
		case mount.TypeBind:
			bo := m.BindOptions
			if bo != nil && bo.ReadOnlyForceRecursive && versions.LessThan(f.apiVersion, "1.44") {
				return nil, dErr(cerrdefs.ErrInvalidArgument, "BindOptions.ReadOnlyForceRecursive needs API v1.44 or newer")
			}
			// Docker creates a missing source with CreateMountpoint; the fake only skips the check.
			if _, err := os.Stat(m.Source); err != nil && (bo == nil || !bo.CreateMountpoint) {
				return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid mount config for type %q: bind source path does not exist: %s", m.Type, m.Source)
			}
			mp := container.MountPoint{Type: m.Type, Source: m.Source, Destination: m.Target, RW: !m.ReadOnly, Propagation: mount.PropagationRPrivate}
			if m.BindOptions != nil && m.BindOptions.Propagation != "" {
				mp.Propagation = m.BindOptions.Propagation
			}
			out = append(out, mp)
		case mount.TypeImage:
			if versions.LessThan(f.apiVersion, imageMountAPIVersion) {
				return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid mount config for type %q: mount type unknown", m.Type)
			}
			img, err := f.lookupImage(m.Source)
			if err != nil {
				return nil, err
			}
			out = append(out, container.MountPoint{Type: m.Type, Source: img.ID, Destination: m.Target, RW: !m.ReadOnly})
		default:
			return nil, dErr(cerrdefs.ErrInvalidArgument, "libdocker.Fake does not emulate mounts of type %q", m.Type)
		}
	}
	return out, nil
}
