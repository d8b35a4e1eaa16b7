package libdocker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"
)

// imageMountAPIVersion is the first Engine API version (Docker 28) with mounts of type image.
const imageMountAPIVersion = "1.48"

// mountPoints checks HostConfig.Binds and HostConfig.Mounts the way the daemon does at create
// and returns what inspect reports for them: a bind's source must be an absolute path that
// exists on the host (unless CreateMountpoint, which Docker ignores before API 1.42), a target
// an absolute path other than "/", and no two mounts share a target; ReadOnlyForceRecursive
// needs API 1.44, image mounts need API 1.48 and an image Docker has. Binds are parsed as
// Docker's Linux parser does (parseBind). Called with f.mu held.
func (f *Fake) mountPoints(hc *container.HostConfig) ([]container.MountPoint, error) {
	out := []container.MountPoint{}
	if hc == nil {
		return out, nil
	}
	targets := map[string]bool{}
	add := func(mp container.MountPoint) error {
		// daemon/volumes.go registerMountPoints: binds first, then mounts, one per target.
		if targets[mp.Destination] {
			return dErr(cerrdefs.ErrInvalidArgument, "Duplicate mount point: %s", mp.Destination)
		}
		targets[mp.Destination] = true
		out = append(out, mp)
		return nil
	}
	for _, m := range hc.Mounts {
		if err := f.validateMount(m); err != nil {
			return nil, err
		}
	}
	for _, raw := range hc.Binds {
		mp, err := f.parseBind(raw)
		if err != nil {
			return nil, err
		}
		if err := add(mp); err != nil {
			return nil, err
		}
	}
	for _, m := range hc.Mounts {
		mp := container.MountPoint{Type: m.Type, Destination: path.Clean(m.Target), RW: !m.ReadOnly, Propagation: mount.PropagationRPrivate}
		switch m.Type {
		case mount.TypeBind:
			mp.Source = path.Clean(m.Source)
			if m.BindOptions != nil && m.BindOptions.Propagation != "" {
				mp.Propagation = m.BindOptions.Propagation
			}
		case mount.TypeImage:
			// Docker 29 (containerd image store) reports the image as given in Name and, in
			// Source, the directory it mounted the image's snapshot on.
			mp.Name = m.Source
			mp.Source = path.Join(f.rootDir, "rootfs", "overlayfs", strings.TrimPrefix(randomID(), "sha256:"))
		}
		if err := add(mp); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// validateMount is the daemon's check of one HostConfig.Mounts entry at create (the router's
// API version rules, then volume/mounts/linux_parser.go validateMountConfigImpl).
func (f *Fake) validateMount(m mount.Mount) error {
	invalid := func(format string, args ...any) error {
		return dErr(cerrdefs.ErrInvalidArgument, "invalid mount config for type %q: %s", m.Type, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Target == "":
		return invalid("field Target must not be empty")
	case path.Clean(m.Target) == "/":
		return invalid("invalid specification: destination can't be '/'")
	case !path.IsAbs(m.Target):
		return invalid("invalid mount path: '%s' mount path must be absolute", m.Target)
	}
	switch m.Type {
	case mount.TypeBind:
		bo := m.BindOptions
		if bo != nil && bo.ReadOnlyForceRecursive && versions.LessThan(f.apiVersion, "1.44") {
			return dErr(cerrdefs.ErrInvalidArgument, "BindOptions.ReadOnlyForceRecursive needs API v1.44 or newer")
		}
		if m.Source == "" {
			return invalid("field Source must not be empty")
		}
		if !path.IsAbs(m.Source) {
			return invalid("invalid mount path: '%s' mount path must be absolute", m.Source)
		}
		// The router drops CreateMountpoint before API 1.42 (Docker 20.10 has no such field).
		// Docker creates a missing source when it sets the mounts up; the fake skips the check.
		create := bo != nil && bo.CreateMountpoint && versions.GreaterThanOrEqualTo(f.apiVersion, "1.42")
		if _, err := os.Stat(m.Source); err != nil && !create {
			return invalid("bind source path does not exist: %s", m.Source)
		}
	case mount.TypeImage:
		if versions.LessThan(f.apiVersion, imageMountAPIVersion) {
			return invalid("mount type unknown")
		}
		if _, err := f.lookupImage(m.Source); err != nil {
			return err
		}
	default:
		return dErr(cerrdefs.ErrInvalidArgument, "libdocker.Fake does not emulate mounts of type %q", m.Type)
	}
	return nil
}

// parseBind reads a HostConfig.Binds entry as Docker's Linux parser does (ParseMountRaw):
// [source:]target[:mode], split at every ':'; an absolute source is a bind, any other a named
// volume (the fake keeps no volumes: it reports where Docker's local driver would put it).
// The daemon answers a bad spec with a 500.
func (f *Fake) parseBind(raw string) (container.MountPoint, error) {
	bad := func(why string) error {
		msg := fmt.Sprintf("invalid volume specification: '%s'", raw)
		if why != "" {
			msg += ": " + why
		}
		return dErr(cerrdefs.ErrInternal, "%s", msg)
	}
	arr := strings.SplitN(raw, ":", 4)
	if arr[0] == "" {
		return container.MountPoint{}, bad("")
	}
	var src, dst, mode string
	switch len(arr) {
	case 1:
		dst = arr[0]
	case 2:
		if validBindMode(arr[1]) {
			return container.MountPoint{}, bad("") // a target and a mode, no source
		}
		src, dst = arr[0], arr[1]
	case 3:
		src, dst, mode = arr[0], arr[1], arr[2]
	default:
		return container.MountPoint{}, bad("")
	}
	if !validBindMode(mode) {
		return container.MountPoint{}, dErr(cerrdefs.ErrInternal, "invalid mode: %s", mode)
	}
	switch {
	case path.Clean(dst) == "/":
		return container.MountPoint{}, bad("invalid mount config for type \"bind\": invalid specification: destination can't be '/'")
	case !path.IsAbs(dst):
		return container.MountPoint{}, bad(fmt.Sprintf("invalid mount config for type \"bind\": invalid mount path: '%s' mount path must be absolute", dst))
	}
	opts := strings.Split(mode, ",")
	mp := container.MountPoint{Destination: path.Clean(dst), Mode: mode, RW: !slices.Contains(opts, "ro")}
	if path.IsAbs(src) {
		mp.Type, mp.Source, mp.Propagation = mount.TypeBind, path.Clean(src), mount.PropagationRPrivate
		for _, o := range opts {
			if bindPropagations[mount.Propagation(o)] {
				mp.Propagation = mount.Propagation(o)
			}
		}
		return mp, nil
	}
	if src == "" {
		src = strings.TrimPrefix(randomID(), "sha256:") // an anonymous volume
	}
	mp.Type, mp.Name, mp.Driver = mount.TypeVolume, src, "local"
	mp.Source = path.Join(f.rootDir, "volumes", src, "_data")
	return mp, nil
}

var bindPropagations = map[mount.Propagation]bool{
	mount.PropagationPrivate: true, mount.PropagationRPrivate: true, mount.PropagationSlave: true,
	mount.PropagationRSlave: true, mount.PropagationShared: true, mount.PropagationRShared: true,
}

// validBindMode is Docker's linuxValidMountMode: comma-separated options, at most one of each
// kind (rw/ro, z/Z, a propagation, nocopy, a consistency).
func validBindMode(mode string) bool {
	if mode == "" {
		return true
	}
	kinds := map[string]int{}
	for _, o := range strings.Split(mode, ",") {
		switch {
		case o == "rw" || o == "ro":
			kinds["rw"]++
		case o == "z" || o == "Z":
			kinds["label"]++
		case bindPropagations[mount.Propagation(o)]:
			kinds["propagation"]++
		case o == "nocopy":
			kinds["copy"]++
		case o == "consistent" || o == "cached" || o == "delegated":
			kinds["consistency"]++
		default:
			return false
		}
	}
	for _, n := range kinds {
		if n > 1 {
			return false
		}
	}
	return true
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
			if mp.Type == mount.TypeImage && mp.Destination == path.Clean(m.Target) {
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
