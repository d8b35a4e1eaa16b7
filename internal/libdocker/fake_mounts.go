package libdocker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
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
			if _, err := f.lookupImage(m.Source); err != nil {
				return nil, err
			}
			// Docker 29 (containerd image store) reports the image as given in Name and, in
			// Source, the directory it mounted the image's snapshot on.
			out = append(out, container.MountPoint{
				Type: m.Type, Name: m.Source, Source: path.Join(f.rootDir, "rootfs", "overlayfs", strings.TrimPrefix(randomID(), "sha256:")),
				Destination: m.Target, RW: !m.ReadOnly, Propagation: mount.PropagationRPrivate,
			})
		default:
			return nil, dErr(cerrdefs.ErrInvalidArgument, "libdocker.Fake does not emulate mounts of type %q", m.Type)
		}
	}
	return out, nil
}

// setupMounts fails as Docker's setupMounts (at start, and for the archive API) does on a
// sub path of an image mount that the image lacks, as Docker 29 does: "cannot access path
// SOURCE/SUB: lstat SOURCE/SUB: no such file or directory" (not found) or, through a file, "error
// while resolving symlinks in combined path ...: not a directory". The image's files are those
// of its layer directories (GraphDriver UpperDir, then LowerDir), looked up top first; an image
// without them has every sub path. Symbolic links are not followed. Called with f.mu held.
func (f *Fake) setupMounts(c *fakeContainer) error {
	for _, m := range c.resp.HostConfig.Mounts {
		if m.Type != mount.TypeImage || m.ImageOptions == nil || m.ImageOptions.Subpath == "" {
			continue
		}
		src := ""
		for _, mp := range c.resp.Mounts {
			if mp.Type == mount.TypeImage && mp.Destination == m.Target {
				src = mp.Source
			}
		}
		full := path.Join(src, m.ImageOptions.Subpath)
		img, err := f.lookupImage(m.Source)
		if err != nil {
			return dErr(cerrdefs.ErrNotFound, "cannot access path %s: lstat %s: no such file or directory", src, src)
		}
		_, err = imageLayerLookup(img, m.ImageOptions.Subpath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return dErr(cerrdefs.ErrNotFound, "cannot access path %s: lstat %s: no such file or directory", full, full)
		case err != nil:
			return dErr(cerrdefs.ErrInternal, "error while resolving symlinks in combined path %q: not a directory", full)
		}
	}
	return nil
}

// imageLayerLookup finds sub in the image's layer directories, top first: what it is (nil for
// an image whose layers the fake does not know), fs.ErrNotExist, or an error when a component
// before the last is not a directory.
func imageLayerLookup(img *image.InspectResponse, sub string) (fs.FileInfo, error) {
	var layers []string
	if d := img.GraphDriver.Data["UpperDir"]; d != "" {
		layers = append(layers, d)
	}
	if d := img.GraphDriver.Data["LowerDir"]; d != "" {
		layers = append(layers, strings.Split(d, ":")...)
	}
	if len(layers) == 0 {
		return nil, nil
	}
	comps := strings.Split(path.Clean(sub), "/")
	var fi fs.FileInfo
	for i := range comps {
		prefix := filepath.Join(comps[:i+1]...)
		fi = nil
		for _, l := range layers {
			if st, err := os.Lstat(filepath.Join(l, prefix)); err == nil {
				fi = st
				break
			}
		}
		if fi == nil {
			return nil, fs.ErrNotExist
		}
		if i < len(comps)-1 && !fi.IsDir() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil, fs.ErrInvalid
		}
	}
	return fi, nil
}

// StatContainerPath implements Client: the archive API sets up the container's mounts first
// (setupMounts; Docker answers their failure with a 500), then stats the path. The fake has no
// root filesystem: it knows "/" and the targets of image mounts.
func (f *Fake) StatContainerPath(ctx context.Context, id, p string) (container.PathStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "StatContainerPath"); err != nil {
		return container.PathStat{}, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return container.PathStat{}, err
	}
	if err := f.setupMounts(c); err != nil {
		return container.PathStat{}, classify(dErr(cerrdefs.ErrInternal, "%s", err.(*daemonError).msg))
	}
	p = path.Clean("/" + p)
	if p == "/" {
		return container.PathStat{Name: "/", Mode: fs.ModeDir | 0o755}, nil
	}
	for _, m := range c.resp.HostConfig.Mounts {
		if m.Type != mount.TypeImage || path.Clean(m.Target) != p {
			continue
		}
		st := container.PathStat{Name: path.Base(p), Mode: fs.ModeDir | 0o755}
		if m.ImageOptions != nil && m.ImageOptions.Subpath != "" {
			if img, err := f.lookupImage(m.Source); err == nil {
				if fi, err := imageLayerLookup(img, m.ImageOptions.Subpath); err == nil && fi != nil {
					st.Mode, st.Size = fi.Mode(), fi.Size()
				}
			}
		}
		return st, nil
	}
	return container.PathStat{}, dErr(cerrdefs.ErrNotFound, "Could not find the file %s in container %s", p, strings.TrimPrefix(c.resp.Name, "/"))
}
