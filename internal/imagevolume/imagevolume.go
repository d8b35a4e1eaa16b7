// Package imagevolume mounts images as volumes of containers (Kubernetes ImageVolume) and keeps
// the index of which containers mount which images.
package imagevolume

// Image volumes (Kubernetes ImageVolume): a CRI Mount whose Image is set mounts that image's
// filesystem read-only at container_path, or only its image_sub_path.
//
// Docker 28 (Engine API 1.48) mounts images itself (mount type "image"); we use that when the
// negotiated API version allows. Older daemons cannot, so on the overlay2 storage driver we mount
// the image's layers ourselves, read-only, under ROOT/image-volumes/<key>/<n> (an overlay of the
// layer directories Docker reports, or a read-only bind of a single layer) and give Docker a
// read-only bind of that directory or of the resolved sub path. Other storage drivers are refused.
//
// What a container mounts is recorded in its Label, so that ContainerStatus reports
// it, StartContainer re-establishes a mount that is gone (after a reboot), RemoveContainer
// unmounts, and a restarted cri-dockerd rebuilds the in-memory index that lets RemoveImage refuse
// to remove an image mounted by a container.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/versions"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/keyedmutex"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
)

const (
	// Label holds a container's image volumes (imageVolumeSet, JSON).
	Label = "io.cri-dockerd.image-volumes"
	// Dir is the directory under the root directory that holds our own mounts.
	Dir = "image-volumes"
	// NativeAPIVersion is the first Engine API (Docker 28) with mounts of type image.
	NativeAPIVersion = "1.48"
	// imageVolumeReapInterval is how often the mounts of containers removed without
	// RemoveContainer (RemovePodSandbox, docker rm) are looked for, while there are any mounts.
	imageVolumeReapInterval = 10 * time.Second
	// maxMountData is what mount(2) copies of its options: one page.
	maxMountData = 4095
)

// imageVolumeSet is what a container's Label records.
type imageVolumeSet struct {
	Version int `json:"v"`
	// Key names the directory ROOT/image-volumes/<key> of our own mounts; empty when Docker
	// mounts every image itself.
	Key    string             `json:"key,omitempty"`
	Mounts []imageVolumeMount `json:"mounts"`
}

// imageVolumeMount is one image volume of a container.
type imageVolumeMount struct {
	ContainerPath string `json:"containerPath"`
	// Image is the image as the mount asked for it; UserImage as the user wrote it.
	Image     string `json:"image"`
	UserImage string `json:"userImage,omitempty"`
	// ImageID is what Image resolved to at create: the CRI image_ref.
	ImageID string `json:"imageId"`
	SubPath string `json:"subPath,omitempty"`
	// Native mounts are Docker's (type image); the others are ours, in directory <key>/<Index>.
	Native bool `json:"native,omitempty"`
	Index  int  `json:"index"`
}

// parseImageVolumes reads a container's record; nil when it has none (an empty label: every
// container cri-dockerd creates carries the key). A record that check refuses is an error.
func parseImageVolumes(labels map[string]string) (*imageVolumeSet, error) {
	raw := labels[Label]
	if raw == "" {
		return nil, nil
	}
	var set imageVolumeSet
	if err := json.Unmarshal([]byte(raw), &set); err != nil {
		return nil, fmt.Errorf("label %s: %w", Label, err)
	}
	if err := set.check(); err != nil {
		return nil, fmt.Errorf("label %s: %w", Label, err)
	}
	return &set, nil
}

// check refuses a record Prepare cannot have written. The key becomes a directory under ours
// and each index one below it: a record from anywhere else (an image's label on a container
// created before cri-dockerd reserved the key) must not name any other directory.
func (set *imageVolumeSet) check() error {
	if set.Key != "" && !isRandomKey(set.Key) {
		return fmt.Errorf("key %q is not one cri-dockerd makes", set.Key)
	}
	seen := make(map[int]bool, len(set.Mounts))
	for _, m := range set.Mounts {
		if m.Index < 0 || m.Index >= len(set.Mounts) || seen[m.Index] {
			return fmt.Errorf("mount at %q: index %d is out of range or repeated", m.ContainerPath, m.Index)
		}
		seen[m.Index] = true
		if !filepath.IsAbs(m.ContainerPath) {
			return fmt.Errorf("mount at %q: the container path is not absolute", m.ContainerPath)
		}
	}
	return nil
}

// Mounter mounts image layers read-only; the tests replace it.
type Mounter interface {
	// MountLayers mounts layers (top first) read-only on target, an existing directory.
	MountLayers(target string, layers []string) error
	// Unmount detaches whatever is mounted on target; nothing mounted is not an error.
	Unmount(target string) error
	// MountPointsUnder lists the mount points at or below dir.
	MountPointsUnder(dir string) ([]string, error)
}

// imageVolumeUser is a container (or a CreateContainer in progress) that mounts images.
type imageVolumeUser struct {
	name string // the Docker container name, for messages
	set  imageVolumeSet
}

// Manager is the in-memory index of the containers that mount images, and our mounts.
type Manager struct {
	docker  libdocker.Client
	log     *logrus.Entry
	dir     string // ROOT/image-volumes; "" without a root directory
	mounter Mounter
	locks   keyedmutex.Mutex // per container ID / pending key
	// dockerError is the caller's mapping of Docker's errors to gRPC statuses.
	dockerError func(err error, format string, args ...any) error

	mu sync.Mutex
	// users by container ID; a CreateContainer in progress is under "pending/" + its key.
	users map[string]*imageVolumeUser

	stop chan struct{}
	done chan struct{}
}

// Config is what a Manager works with.
type Config struct {
	Docker libdocker.Client
	Log    *logrus.Entry
	// RootDirectory holds Dir, our own mounts; "" for none (only Docker's native mounts).
	RootDirectory string
	// Mounter replaces mount(2) (tests); nil is the kernel's.
	Mounter Mounter
	// DockerError turns an error from Docker into the gRPC status a CRI caller gets, keeping
	// what the call was doing: the caller's, so that image volumes answer as its other RPCs do;
	// nil wraps the error as it is.
	DockerError func(err error, format string, args ...any) error
}

// New returns a Manager; Start loads its index.
func New(cfg Config) *Manager {
	v := &Manager{docker: cfg.Docker, log: cfg.Log, mounter: cfg.Mounter, dockerError: cfg.DockerError, users: map[string]*imageVolumeUser{}}
	if v.mounter == nil {
		v.mounter = linuxMounter{}
	}
	if v.dockerError == nil {
		v.dockerError = func(err error, format string, args ...any) error {
			return fmt.Errorf(format+": %w", append(args, err)...)
		}
	}
	if cfg.RootDirectory != "" {
		v.dir = filepath.Join(cfg.RootDirectory, Dir)
	}
	return v
}

const pendingPrefix = "pending/"

func (v *Manager) put(id string, u *imageVolumeUser) {
	v.mu.Lock()
	v.users[id] = u
	v.mu.Unlock()
}

func (v *Manager) get(id string) (string, *imageVolumeUser) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if u, ok := v.users[id]; ok {
		return id, u
	}
	// The CRI passes full IDs; accept an unambiguous prefix as Docker does.
	var found string
	for cid := range v.users {
		if id != "" && !strings.HasPrefix(cid, pendingPrefix) && strings.HasPrefix(cid, id) {
			if found != "" {
				return "", nil
			}
			found = cid
		}
	}
	if found == "" {
		return "", nil
	}
	return found, v.users[found]
}

func (v *Manager) drop(id string) {
	v.mu.Lock()
	delete(v.users, id)
	v.mu.Unlock()
}

// Len is how many containers, and creates in progress, the index holds.
func (v *Manager) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.users)
}

// Start rebuilds the index from the labels of Docker's containers, removes our mounts that no
// container records (a crash in the middle of a CreateContainer, containers removed while we
// were down) and starts the reaper.
func (v *Manager) Start(ctx context.Context) error {
	list, err := v.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(Label)})
	if err != nil {
		return err
	}
	keys := map[string]bool{}
	for _, c := range list {
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		set, err := parseImageVolumes(c.Labels)
		if err != nil {
			// Nothing of it is mounted, unmounted or kept from RemoveImage.
			v.log.WithField("id", c.ID).Warnf("container %s: ignoring its image volumes: %v", name, err)
			continue
		}
		if set == nil {
			continue
		}
		v.users[c.ID] = &imageVolumeUser{name: name, set: *set}
		if set.Key != "" {
			keys[set.Key] = true
		}
	}
	if v.dir != "" {
		entries, err := os.ReadDir(v.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			if !keys[e.Name()] {
				v.log.WithField("dir", filepath.Join(v.dir, e.Name())).Info("removing image volume mounts no container uses")
				if err := v.removeDir(e.Name()); err != nil {
					v.log.Warnf("remove orphaned image volumes: %v", err)
				}
			}
		}
	}
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	go v.reap()
	return nil
}

// Close stops the reaper.
func (v *Manager) Close() {
	if v.stop != nil {
		close(v.stop)
		<-v.done
		v.stop = nil
	}
}

// reap releases the mounts of containers that are gone without a RemoveContainer (their pod
// was removed with RemovePodSandbox, or someone ran docker rm).
func (v *Manager) reap() {
	defer close(v.done)
	t := time.NewTicker(imageVolumeReapInterval)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = supervise.Run(v.log, "image volume reaper", func() { v.Reap(ctx) })
		cancel()
	}
}

// Reap releases the mounts of the containers Docker no longer has: one round of the reaper.
func (v *Manager) Reap(ctx context.Context) {
	v.mu.Lock()
	var ids []string
	for id := range v.users {
		if !strings.HasPrefix(id, pendingPrefix) {
			ids = append(ids, id)
		}
	}
	v.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	list, err := v.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(Label)})
	if err != nil {
		v.log.Debugf("image volumes: list containers: %v", err)
		return
	}
	exists := make(map[string]bool, len(list))
	for _, c := range list {
		exists[c.ID] = true
	}
	for _, id := range ids {
		if !exists[id] {
			if err := v.ReleaseContainer(id); err != nil {
				v.log.WithField("id", id).Warnf("release image volumes of a removed container: %v", err)
			}
		}
	}
}

// ValidateMount checks what can be checked of an image volume without Docker.
func ValidateMount(m *runtimeapi.Mount) error {
	img := m.Image.Image
	if m.ContainerPath == "" || !filepath.IsAbs(m.ContainerPath) {
		return invalidf("image volume %q -> %q: container_path must be an absolute path", img, m.ContainerPath)
	}
	if m.HostPath != "" {
		return invalidf("mount -> %q: set either host_path (%q) or image (%q), not both", m.ContainerPath, m.HostPath, img)
	}
	if !m.Readonly {
		return invalidf("image volume %q -> %q: image volumes are read-only; set readonly", img, m.ContainerPath)
	}
	if _, err := cleanSubPath(m.ImageSubPath); err != nil {
		return invalidf("image volume %q -> %q: %v", img, m.ContainerPath, err)
	}
	return nil
}

// cleanSubPath checks an image_sub_path: relative, never climbing out of the image.
func cleanSubPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if filepath.IsAbs(p) {
		return "", fmt.Errorf("image_sub_path %q must be a relative path", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("image_sub_path %q must not contain \"..\"", p)
		}
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("image_sub_path %q contains a NUL byte", p)
	}
	c := filepath.Clean(p)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// Prepared are the image volumes of a CreateContainer in progress.
type Prepared struct {
	v    *Manager
	key  string // pending index key
	name string
	set  imageVolumeSet
}

// Prepare resolves the image volumes among mounts, mounts those Docker cannot mount itself,
// and adds them to the container's Docker configuration. The caller must Commit the result
// with the new container's ID, or Release it. Nil when there are no image volumes.
func (v *Manager) Prepare(ctx context.Context, name string, mounts []*runtimeapi.Mount, cfg *container.Config, hc *container.HostConfig) (_ *Prepared, err error) {
	var vols []*runtimeapi.Mount
	for _, m := range mounts {
		if m.GetImage().GetImage() != "" {
			vols = append(vols, m)
		}
	}
	if len(vols) == 0 {
		return nil, nil
	}
	apiVersion := v.docker.APIVersion()
	native := versions.GreaterThanOrEqualTo(apiVersion, NativeAPIVersion)
	images := make([]*image.InspectResponse, len(vols))
	for i, m := range vols {
		img, err := v.docker.InspectImage(ctx, m.Image.Image)
		if libdocker.IsNotFound(err) {
			return nil, notFoundf("image %q of the image volume at %q is not present: pull it first", m.Image.Image, m.ContainerPath)
		}
		if err != nil {
			return nil, v.dockerError(err, "inspect image %q of the image volume at %q", m.Image.Image, m.ContainerPath)
		}
		if !native {
			if driver := img.GraphDriver.Name; driver != "overlay2" {
				return nil, status.Errorf(codes.FailedPrecondition, "image volume %q at %q: Docker's storage driver is %q and its Engine API %s has no image mounts: image volumes need the overlay2 storage driver or Docker >= 28 (Engine API %s)", m.Image.Image, m.ContainerPath, driver, apiVersion, NativeAPIVersion)
			}
			if v.dir == "" {
				return nil, status.Errorf(codes.FailedPrecondition, "image volume %q at %q: Docker's Engine API %s has no image mounts and cri-dockerd has no root directory to mount images in", m.Image.Image, m.ContainerPath, apiVersion)
			}
		}
		images[i] = img
	}

	p := &Prepared{v: v, name: name, key: pendingPrefix + randomKey(), set: imageVolumeSet{Version: 1}}
	if !native {
		p.set.Key = randomKey()
	}
	for i, m := range vols {
		sub, _ := cleanSubPath(m.ImageSubPath) // validated before
		p.set.Mounts = append(p.set.Mounts, imageVolumeMount{
			ContainerPath: m.ContainerPath, Image: m.Image.Image, UserImage: m.Image.UserSpecifiedImage,
			ImageID: images[i].ID, SubPath: sub, Native: native, Index: i,
		})
	}
	// In the index before anything is mounted: RemoveImage refuses from now on.
	v.put(p.key, &imageVolumeUser{name: name + " (being created)", set: p.set})
	defer func() {
		if err != nil {
			p.Release()
		}
	}()
	for i, rec := range p.set.Mounts {
		if native {
			hc.Mounts = append(hc.Mounts, mount.Mount{
				Type: mount.TypeImage, Source: rec.ImageID, Target: rec.ContainerPath, ReadOnly: true,
				ImageOptions: &mount.ImageOptions{Subpath: rec.SubPath},
			})
			continue
		}
		dir := v.mountDir(p.set.Key, i)
		if err := v.mountImage(dir, images[i]); err != nil {
			return nil, status.Errorf(codes.Internal, "image volume %q at %q: %v", rec.Image, rec.ContainerPath, err)
		}
		src, err := resolveInRoot(dir, rec.SubPath)
		if err != nil {
			return nil, subPathError(err, rec.SubPath, rec.Image)
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: src, Target: rec.ContainerPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	raw, _ := json.Marshal(p.set)
	cfg.Labels[Label] = string(raw)
	return p, nil
}

func subPathError(err error, sub, img string) error {
	if errors.Is(err, fs.ErrNotExist) {
		return notFoundf("image_sub_path %q does not exist in image %q", sub, img)
	}
	return invalidf("image_sub_path %q of image %q: %v", sub, img, err)
}

// Check makes Docker resolve the sub paths of its own image mounts in container id, just
// created: Docker 29 (and 28, by its source) accepts a sub path the image lacks at create and
// fails only at start ("cannot access path ..."), where the CRI, as containerd, refuses it at
// CreateContainer with NotFound (the kubelet's node e2e expects CreateContainerError). We
// cannot see the image's files without mounting them; Docker's archive API sets up
// the container's mounts as a start does, so a stat of one of its targets fails the same way,
// without starting anything. One call checks every mount; none without a native sub path.
// The caller removes the container when it fails.
func (p *Prepared) Check(ctx context.Context, id string) error {
	if p == nil {
		return nil
	}
	target := ""
	for _, m := range p.set.Mounts {
		if m.Native && m.SubPath != "" {
			target = m.ContainerPath
			break
		}
	}
	if target == "" {
		return nil
	}
	_, err := p.v.docker.StatContainerPath(ctx, id, target)
	if err == nil {
		return nil
	}
	if e := nativeSubPathError(p.set.Mounts, err); e != nil {
		return e
	}
	return p.v.dockerError(err, "image volumes of container %q: check with Docker that their sub paths exist", p.name)
}

// SubPathStartError maps Docker's failure to start container id on a sub path of its image
// mounts (a container created before check existed, or by a Docker that resolves sub paths
// only at start after all) to NotFound or InvalidArgument naming the mount; nil for any other
// failure.
func (v *Manager) SubPathStartError(id string, err error) error {
	_, u := v.get(id)
	if u == nil {
		return nil
	}
	return nativeSubPathError(u.set.Mounts, err)
}

// nativeSubPathError names the image volume whose sub path Docker could not resolve (its error
// ends the path it tried with "/SUB"), or all of those with a sub path when none is named.
func nativeSubPathError(mounts []imageVolumeMount, err error) error {
	notFound := errors.Is(err, libdocker.ErrSubpathNotFound)
	if !notFound && !errors.Is(err, libdocker.ErrSubpathInvalid) {
		return nil
	}
	msg := err.Error()
	var named, all []imageVolumeMount
	for _, m := range mounts {
		if !m.Native || m.SubPath == "" {
			continue
		}
		all = append(all, m)
		if strings.Contains(msg, "/"+m.SubPath+": ") || strings.Contains(msg, "/"+m.SubPath+"\": ") {
			named = append(named, m)
		}
	}
	if len(all) == 0 {
		return nil
	}
	if len(named) == 0 {
		named = all
	}
	var what []string
	for _, m := range named {
		what = append(what, fmt.Sprintf("image_sub_path %q of image %q at %q", m.SubPath, m.Image, m.ContainerPath))
	}
	desc := strings.Join(what, " or ")
	if notFound {
		return notFoundf("%s does not exist in the image (Docker: %v)", desc, err)
	}
	return invalidf("%s: Docker cannot mount it: %v", desc, err)
}

// Commit hands the image volumes to the container Docker created.
func (p *Prepared) Commit(id string) {
	if p == nil {
		return
	}
	p.v.mu.Lock()
	delete(p.v.users, p.key)
	p.v.users[id] = &imageVolumeUser{name: p.name, set: p.set}
	p.v.mu.Unlock()
}

// Release undoes Prepare after a failed create.
func (p *Prepared) Release() {
	if p == nil {
		return
	}
	if p.set.Key != "" {
		if err := p.v.removeDir(p.set.Key); err != nil {
			p.v.log.Errorf("image volumes of %s: %v", p.name, err)
		}
	}
	p.v.drop(p.key)
}

func (v *Manager) mountDir(key string, index int) string {
	return filepath.Join(v.dir, key, strconv.Itoa(index))
}

// mountImage mounts img's layers read-only on dir, creating it.
func (v *Manager) mountImage(dir string, img *image.InspectResponse) error {
	layers, err := overlayLayers(img)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return v.mounter.MountLayers(dir, layers)
}

// overlayLayers lists the layer directories of an image on overlay2, top first.
func overlayLayers(img *image.InspectResponse) ([]string, error) {
	if img.GraphDriver.Name != "overlay2" {
		return nil, fmt.Errorf("image %s is on storage driver %q, not overlay2", img.ID, img.GraphDriver.Name)
	}
	data := img.GraphDriver.Data
	var layers []string
	if upper := data["UpperDir"]; upper != "" {
		layers = append(layers, upper)
	}
	if lower := data["LowerDir"]; lower != "" {
		layers = append(layers, strings.Split(lower, ":")...)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("docker reports no layer directories for image %s", img.ID)
	}
	for _, l := range layers {
		if !filepath.IsAbs(l) || strings.ContainsAny(l, ",:\n") {
			return nil, fmt.Errorf("docker reports a layer directory %q that cannot be mounted", l)
		}
	}
	return layers, nil
}

// EnsureMounted re-establishes our mounts of container id that are gone (after a reboot),
// before Docker starts it: Docker would bind an empty directory.
func (v *Manager) EnsureMounted(ctx context.Context, id string) error {
	cid, u := v.get(id)
	if u == nil || u.set.Key == "" {
		return nil
	}
	unlock := v.locks.Lock(cid)
	defer unlock()
	for _, m := range u.set.Mounts {
		if m.Native {
			continue
		}
		dir := v.mountDir(u.set.Key, m.Index)
		points, err := v.mounter.MountPointsUnder(dir)
		if err != nil {
			return status.Errorf(codes.Internal, "image volume at %q: %v", m.ContainerPath, err)
		}
		if len(points) > 0 {
			continue
		}
		img, err := v.docker.InspectImage(ctx, m.ImageID)
		if libdocker.IsNotFound(err) {
			return status.Errorf(codes.FailedPrecondition, "image %q (%s) of the image volume at %q is gone: recreate the container", m.Image, m.ImageID, m.ContainerPath)
		}
		if err != nil {
			return v.dockerError(err, "inspect image %q of the image volume at %q", m.Image, m.ContainerPath)
		}
		v.log.WithFields(logrus.Fields{"id": cid, "image": m.ImageID, "dir": dir}).Info("mounting image volume again")
		if err := v.mountImage(dir, img); err != nil {
			return status.Errorf(codes.Internal, "image volume %q at %q: %v", m.Image, m.ContainerPath, err)
		}
	}
	return nil
}

// ReleaseContainer unmounts the image volumes of a removed container and forgets them.
// Idempotent; the entry stays when an unmount fails, so that a retry can finish.
func (v *Manager) ReleaseContainer(id string) error {
	cid, u := v.get(id)
	if u == nil {
		return nil
	}
	unlock := v.locks.Lock(cid)
	defer unlock()
	if u.set.Key != "" {
		if err := v.removeDir(u.set.Key); err != nil {
			return err
		}
	}
	v.drop(cid)
	return nil
}

// removeDir unmounts everything under ROOT/image-volumes/<key> and removes it. It never
// removes anything recursively: a mount that could not be detached makes it fail, not delete
// the image's files.
func (v *Manager) removeDir(key string) error {
	if v.dir == "" || key == "" || strings.ContainsAny(key, "/.") {
		return nil
	}
	dir := filepath.Join(v.dir, key)
	points, err := v.mounter.MountPointsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first.
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := v.mounter.Unmount(p); err != nil {
			return fmt.Errorf("unmount image volume %s: %w", p, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove image volume directory: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove image volume directory: %w", err)
	}
	return nil
}

// UsersOf names the containers that mount image id, after checking with Docker that they still
// exist (a container removed behind our back releases its mounts here).
func (v *Manager) UsersOf(ctx context.Context, id string) []string {
	v.mu.Lock()
	var ids []string
	for cid, u := range v.users {
		for _, m := range u.set.Mounts {
			if m.ImageID == id {
				ids = append(ids, cid)
				break
			}
		}
	}
	v.mu.Unlock()
	var names []string
	for _, cid := range ids {
		if !strings.HasPrefix(cid, pendingPrefix) {
			if _, err := v.docker.InspectContainer(ctx, cid); libdocker.IsNotFound(err) {
				if err := v.ReleaseContainer(cid); err != nil {
					v.log.WithField("id", cid).Warnf("release image volumes of a removed container: %v", err)
				}
				continue
			}
		}
		_, u := v.get(cid)
		if u == nil {
			continue
		}
		if strings.HasPrefix(cid, pendingPrefix) {
			names = append(names, u.name)
		} else {
			names = append(names, fmt.Sprintf("%s (%.12s)", u.name, cid))
		}
	}
	sort.Strings(names)
	return names
}

// CRIMounts replaces, in a container's reported mounts, the binds that carry our
// image volumes by the image volumes as the CRI describes them.
func CRIMounts(mounts []*runtimeapi.Mount, labels map[string]string) []*runtimeapi.Mount {
	set, err := parseImageVolumes(labels)
	if err != nil || set == nil {
		return mounts
	}
	paths := map[string]bool{}
	for _, m := range set.Mounts {
		paths[m.ContainerPath] = true
	}
	out := make([]*runtimeapi.Mount, 0, len(mounts)+len(set.Mounts))
	for _, m := range mounts {
		if !paths[m.ContainerPath] {
			out = append(out, m)
		}
	}
	for _, m := range set.Mounts {
		out = append(out, &runtimeapi.Mount{
			ContainerPath: m.ContainerPath,
			Readonly:      true,
			Image:         &runtimeapi.ImageSpec{Image: m.Image, UserSpecifiedImage: m.UserImage, ImageRef: m.ImageID},
			ImageSubPath:  m.SubPath,
		})
	}
	return out
}

// keyBytes is how many random bytes a key has; it is twice as many hex digits.
const keyBytes = 12

func randomKey() string {
	b := make([]byte, keyBytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// isRandomKey says whether key is what randomKey makes: 2*keyBytes lowercase hex digits.
func isRandomKey(key string) bool {
	if len(key) != 2*keyBytes {
		return false
	}
	for _, c := range key {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

var errEscapes = errors.New("a symbolic link leads out of the image")

// resolveInRoot resolves the relative path rel inside root (the image's filesystem), following
// symbolic links as the image sees them: an absolute target starts at the image's root, and a
// target that climbs above the root is refused.
func resolveInRoot(root, rel string) (string, error) {
	const maxLinks = 40
	var done []string
	todo := strings.Split(rel, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", errEscapes
			}
			done = done[:len(done)-1]
			continue
		}
		p := filepath.Join(append([]string{root}, append(done, c)...)...)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", fmt.Errorf("too many symbolic links")
			}
			target, err := os.Readlink(p)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				done = nil
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if len(todo) > 0 && !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", filepath.Join(append(done, c)...))
		}
		done = append(done, c)
	}
	return filepath.Join(append([]string{root}, done...)...), nil
}

// linuxMounter mounts with mount(2).
type linuxMounter struct{}

func (linuxMounter) MountLayers(target string, layers []string) error {
	if len(layers) == 1 {
		// overlayfs needs two lower directories without an upper one: bind the only layer.
		if err := unix.Mount(layers[0], target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", layers[0], target, err)
		}
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("make %s read-only: %w", target, err)
		}
		return nil
	}
	data := "lowerdir=" + strings.Join(layers, ":")
	if len(data) > maxMountData {
		// Docker's short links (overlay2/l/<id>) keep many layers within one page, as Docker does.
		short, err := shortLayerLinks(layers)
		if err != nil {
			return err
		}
		data = "lowerdir=" + strings.Join(short, ":")
		if len(data) > maxMountData {
			return fmt.Errorf("the image has too many layers (%d) to mount them in one overlay", len(layers))
		}
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, data); err != nil {
		return fmt.Errorf("mount overlay of %d layers on %s: %w", len(layers), target, err)
	}
	return nil
}

// shortLayerLinks maps overlay2's <root>/<id>/diff to its short link <root>/l/<short>.
func shortLayerLinks(layers []string) ([]string, error) {
	out := make([]string, len(layers))
	for i, l := range layers {
		layerDir := filepath.Dir(l)
		id, err := os.ReadFile(filepath.Join(layerDir, "link"))
		if err != nil {
			return nil, fmt.Errorf("short link of layer %s: %w", l, err)
		}
		out[i] = filepath.Join(filepath.Dir(layerDir), "l", strings.TrimSpace(string(id)))
	}
	return out, nil
}

func (linuxMounter) Unmount(target string) error {
	// Lazy: gone from the mount table at once, even while a container's copy is still in use.
	for range 8 {
		err := unix.Unmount(target, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not (or no longer) a mount point
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (linuxMounter) MountPointsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// invalidf answers a request the caller must fix.
func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// notFoundf answers a request for an object that does not exist.
func notFoundf(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}
