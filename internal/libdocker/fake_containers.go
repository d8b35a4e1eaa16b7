package libdocker

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/versions"
	units "github.com/docker/go-units"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// SetStopExitCode sets the exit code the container reports after StopContainer (default 0,
// a process that exits cleanly on SIGTERM; 137 emulates one that had to be killed).
func (f *Fake) SetStopExitCode(idOrName string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return err
	}
	f.stopExitCodes[c.resp.ID] = code
	return nil
}

// runningContainerLocked is the running container idOrName names (f.mu held): the start of
// every emulated exit.
func (f *Fake) runningContainerLocked(idOrName string) (*fakeContainer, error) {
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return nil, err
	}
	if !c.resp.State.Running {
		return nil, fmt.Errorf("libdocker.Fake: container %s is not running", idOrName)
	}
	return c, nil
}

// ExitContainer makes a running container's process exit on its own with code, as a crash would.
func (f *Fake) ExitContainer(idOrName string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.runningContainerLocked(idOrName)
	if err != nil {
		return err
	}
	c.setStopped(code)
	f.emit(c, events.ActionDie, exitCodeAttr(code))
	return nil
}

// OOMKillContainer ends a running container as the kernel's OOM killer does (exit code 137)
// and emits Docker's oom and die events. Docker 20.10 records State.OOMKilled only when
// containerd's TaskOOM comes before the task's exit: recorded false emulates the race it loses
// (die first, OOMKilled false, the oom event after).
func (f *Fake) OOMKillContainer(idOrName string, recorded bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.runningContainerLocked(idOrName)
	if err != nil {
		return err
	}
	if recorded {
		f.emit(c, events.ActionOOM, nil)
	}
	c.setStopped(137)
	c.resp.State.OOMKilled = recorded
	f.emit(c, events.ActionDie, exitCodeAttr(137))
	if !recorded {
		f.emit(c, events.ActionOOM, nil)
	}
	return nil
}

// RestartingContainer makes a running container's process exit with code and leaves it as
// Docker does while a restart policy waits to start it again: status "restarting", Running and
// Restarting both true, no process. StopContainer ends that: the container is exited.
func (f *Fake) RestartingContainer(idOrName string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.runningContainerLocked(idOrName)
	if err != nil {
		return err
	}
	c.setStopped(code)
	f.emit(c, events.ActionDie, exitCodeAttr(code))
	st := c.resp.State
	st.Status, st.Running, st.Restarting = container.StateRestarting, true, true
	return nil
}

// Containers returns deep copies of all containers, oldest first, without counting a call.
func (f *Fake) Containers() []container.InspectResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]container.InspectResponse, 0, len(f.containers))
	for _, c := range f.sortedContainers(false) {
		out = append(out, *c.inspect())
	}
	return out
}

// validContainerName is Docker's rule (daemon/names.RestrictedNamePattern), after a leading "/".
var validContainerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// CreateContainer implements Client, checking in the daemon's order: runtime, image, name.
func (f *Fake) CreateContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "CreateContainer"); err != nil {
		return "", err
	}
	if cfg == nil {
		return "", dErr(cerrdefs.ErrInvalidArgument, "Config cannot be empty in order to create a container")
	}
	config := clone(*cfg)
	hostConfig := container.HostConfig{}
	if hc != nil {
		hostConfig = clone(*hc)
	}
	if hostConfig.Runtime == "" {
		hostConfig.Runtime = f.defaultRT
	}
	if err := verifyMemory(hostConfig.Resources, false); err != nil {
		return "", err
	}
	// daemon_unix.go verifyPlatformContainerSettings: the systemd driver takes slices alone.
	if p := hostConfig.CgroupParent; p != "" && f.cgroupDriver == "systemd" && (len(p) <= 6 || !strings.HasSuffix(p, ".slice")) {
		return "", dErr(cerrdefs.ErrInvalidArgument, "cgroup-parent for systemd cgroup should be a valid slice named as \"xxx.slice\"")
	}
	if hostConfig.Memory > 0 && hostConfig.MemorySwap == 0 {
		hostConfig.MemorySwap = 2 * hostConfig.Memory // Docker's default: as much swap as memory
	}
	if hostConfig.NetworkMode == "" {
		// Docker 25 (API 1.44) reports "bridge" where older daemons report "default".
		hostConfig.NetworkMode = "bridge"
		if versions.LessThan(f.apiVersion, "1.44") {
			hostConfig.NetworkMode = "default"
		}
	}
	// Daemons before API 1.43 have no HostConfig.Annotations: the field is dropped unread.
	if versions.LessThan(f.apiVersion, "1.43") {
		hostConfig.Annotations = nil
	}
	// The cdi device driver exists from Docker 25 (API 1.44).
	for _, dr := range hostConfig.DeviceRequests {
		if dr.Driver == "cdi" && versions.LessThan(f.apiVersion, "1.44") {
			return "", dErr(cerrdefs.ErrInvalidArgument, "could not select device driver %q with capabilities: %v", dr.Driver, dr.Capabilities)
		}
	}
	// Docker 23+ (API 1.42) runs containerd shims by their name without configuration.
	if _, ok := f.runtimes[hostConfig.Runtime]; !ok && !(fakeShimName.MatchString(hostConfig.Runtime) && versions.GreaterThanOrEqualTo(f.apiVersion, "1.42")) {
		msg := "unknown or invalid runtime name: " + hostConfig.Runtime
		if versions.LessThanOrEqualTo(f.apiVersion, "1.41") {
			msg = "Unknown runtime specified " + hostConfig.Runtime
		}
		return "", classify(dErr(cerrdefs.ErrInvalidArgument, "%s", msg))
	}
	if config.Image == "" {
		return "", dErr(cerrdefs.ErrInvalidArgument, "No command specified")
	}
	img, err := f.lookupImage(config.Image)
	if err != nil {
		return "", err
	}
	if img.Config != nil {
		mergeImageConfig(&config, &img.Config.ImageConfig)
	}
	if err := f.mergeLogConfig(&hostConfig.LogConfig); err != nil {
		return "", err
	}
	if config.Labels == nil {
		config.Labels = map[string]string{}
	}
	if len(config.Entrypoint) == 0 && len(config.Cmd) == 0 {
		return "", dErr(cerrdefs.ErrInvalidArgument, "No command specified")
	}
	mounts, err := f.mountPoints(&hostConfig)
	if err != nil {
		return "", err
	}
	id := randomID()
	if name == "" {
		name = "fake_" + id[:12]
	}
	name = strings.TrimPrefix(name, "/")
	if !validContainerName.MatchString(name) {
		return "", dErr(cerrdefs.ErrInvalidArgument, "Invalid container name (%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", name)
	}
	for _, c := range f.containers {
		if c.resp.Name == "/"+name {
			return "", dErr(cerrdefs.ErrConflict, "Conflict. The container name %q is already in use by container %q. You have to remove (or rename) that container to be able to reuse that name.", "/"+name, c.resp.ID)
		}
	}
	cmd := append(slices.Clone(config.Entrypoint), config.Cmd...)
	now := time.Now().UTC()
	f.seq++
	f.containers[id] = &fakeContainer{seq: f.seq, created: now, resp: container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: id, Created: now.Format(time.RFC3339Nano), Path: cmd[0], Args: cmd[1:],
			Image: img.ID, Name: "/" + name, Driver: "overlay2", Platform: "linux",
			HostConfig: &hostConfig,
			LogPath:    fakeLogPath(hostConfig.LogConfig.Type, id),
			State: &container.State{
				Status: container.StateCreated, StartedAt: zeroTime, FinishedAt: zeroTime,
			},
		},
		Config:          &config,
		Mounts:          mounts,
		NetworkSettings: &container.NetworkSettings{},
	}}
	f.emit(f.containers[id], events.ActionCreate, nil)
	if err := f.leave(ctx, "CreateContainer"); err != nil {
		return "", err
	}
	return id, nil
}

const zeroTime = "0001-01-01T00:00:00Z"

// mergeImageConfig applies the image's defaults the way the daemon's merge() does, so
// Inspect shows image labels and USER on the container.
func mergeImageConfig(c *container.Config, img *ocispec.ImageConfig) {
	if c.User == "" {
		c.User = img.User
	}
	for _, e := range img.Env {
		k, _, _ := strings.Cut(e, "=")
		if !slices.ContainsFunc(c.Env, func(u string) bool { uk, _, _ := strings.Cut(u, "="); return uk == k }) {
			c.Env = append(c.Env, e)
		}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for k, v := range img.Labels {
		if _, ok := c.Labels[k]; !ok {
			c.Labels[k] = v
		}
	}
	if len(c.Entrypoint) == 0 {
		if len(c.Cmd) == 0 {
			c.Cmd = slices.Clone(img.Cmd)
		}
		if c.Entrypoint == nil {
			c.Entrypoint = slices.Clone(img.Entrypoint)
		}
	}
	if c.WorkingDir == "" {
		c.WorkingDir = img.WorkingDir
	}
	if c.StopSignal == "" {
		c.StopSignal = img.StopSignal
	}
}

// lookupContainer resolves like the daemon's GetContainer: full ID, exact name, ID prefix.
func (f *Fake) lookupContainer(ref string) (*fakeContainer, error) {
	if ref == "" {
		return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid container name or ID: value is empty")
	}
	if c, ok := f.containers[ref]; ok {
		return c, nil
	}
	name := "/" + strings.TrimPrefix(ref, "/")
	var match *fakeContainer
	for id, c := range f.containers {
		if c.resp.Name == name {
			return c, nil
		}
		if strings.HasPrefix(id, ref) {
			if match != nil {
				return nil, dErr(cerrdefs.ErrInvalidArgument, "multiple IDs found with provided prefix: %s", ref)
			}
			match = c
		}
	}
	if match == nil {
		return nil, notFound("container", ref)
	}
	return match, nil
}

// StartContainer implements Client. Starting a running container is not an error (Docker
// answers 304). A broken runtime fails like Docker: the container keeps its previous state,
// with State.Error and the exit code Docker derives from the error text.
func (f *Fake) StartContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "StartContainer"); err != nil {
		return err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	st := c.resp.State
	if st.Running {
		return nil
	}
	// Docker sets up the mounts before it asks the runtime: a missing image sub path fails
	// first, with exit code 128.
	if err := f.setupMounts(c); err != nil {
		st.Error, st.ExitCode, st.Pid = err.(*daemonError).msg, 128, 0
		return classify(err)
	}
	// runc's systemd driver expands a slice name by its dashes and refuses a path.
	if p := c.resp.HostConfig.CgroupParent; f.cgroupDriver == "systemd" && strings.Contains(p, "/") {
		// As Debian 12's Docker 20.10 and runc 1.1.5 answer it (seen in the VM test bed).
		msg := fmt.Sprintf("failed to create shim task: OCI runtime create failed: runc create failed: invalid slice name: %s: unknown", p)
		st.Error, st.ExitCode, st.Pid = msg, 128, 0
		return classify(dErr(cerrdefs.ErrUnknown, "%s", msg))
	}
	rtName := c.resp.HostConfig.Runtime
	if f.broken[rtName] {
		rt := f.runtimes[rtName]
		var msg string
		if rt.Path != "" {
			msg = fmt.Sprintf("OCI runtime create failed: unable to retrieve OCI runtime error (open /run/containerd/io.containerd.runtime.v2.task/moby/%s/log.json: no such file or directory): fork/exec %s: permission denied: unknown", c.resp.ID, rt.Path)
		} else {
			msg = fmt.Sprintf("failed to create shim task: failed to start shim: exec: \"containerd-shim-%s\": executable file not found in $PATH: unknown", shimBinary(rt.Type))
		}
		// daemon/errors.go setExitCodeFromError: EACCES is 126 and a missing file 127, both
		// "invalid parameter"; anything else 128.
		var kind error = cerrdefs.ErrInvalidArgument
		code := 126
		switch {
		case strings.Contains(msg, "permission denied"):
		case strings.Contains(msg, "executable file not found"), strings.Contains(msg, "no such file or directory"):
			code = 127
		default:
			kind, code = cerrdefs.ErrUnknown, 128
		}
		st.Error, st.ExitCode, st.Pid = msg, code, 0
		return classify(dErr(kind, "%s", msg))
	}
	now := time.Now().UTC()
	f.nextPid++
	c.started = now
	st.Status, st.Running, st.Pid, st.ExitCode, st.Error = container.StateRunning, true, f.nextPid, 0, ""
	st.StartedAt = now.Format(time.RFC3339Nano)
	f.emit(c, events.ActionStart, nil)
	return f.leave(ctx, "StartContainer")
}

// shimBinary maps a shim v2 runtime type to its binary name, as containerd does.
func shimBinary(typ string) string {
	parts := strings.Split(typ, ".")
	if len(parts) < 2 {
		return typ
	}
	return strings.Join(parts[len(parts)-2:], "-")
}

func (c *fakeContainer) setStopped(code int) {
	defer c.notify()
	c.finished = time.Now().UTC()
	st := c.resp.State
	st.Status, st.Running, st.Restarting, st.Pid, st.ExitCode = container.StateExited, false, false, 0, code
	st.FinishedAt = c.finished.Format(time.RFC3339Nano)
}

// LastStopTimeout is the timeout of the last StopContainer call for the container with this full
// id, and whether there was one.
func (f *Fake) LastStopTimeout(id string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.stopTimeouts[id]
	return d, ok
}

// StopContainer implements Client; stopping a container that is not running is not an error.
func (f *Fake) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "StopContainer"); err != nil {
		return err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	if f.stopTimeouts == nil {
		f.stopTimeouts = map[string]time.Duration{}
	}
	f.stopTimeouts[c.resp.ID] = timeout
	if c.resp.State.Running {
		c.setStopped(f.stopExitCodes[c.resp.ID])
		f.emit(c, events.ActionDie, exitCodeAttr(c.resp.State.ExitCode))
		f.emit(c, events.ActionStop, nil)
	}
	return nil
}

// RemoveContainer implements Client; a running container needs Force.
func (f *Fake) RemoveContainer(ctx context.Context, id string, opts container.RemoveOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "RemoveContainer"); err != nil {
		return err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	if c.resp.State.Running && !opts.Force {
		return dErr(cerrdefs.ErrConflict, "cannot remove container %q: container is running: stop the container before removing or force remove", id)
	}
	if c.resp.State.Running {
		c.setStopped(137)
		f.emit(c, events.ActionDie, exitCodeAttr(137))
	}
	delete(f.containers, c.resp.ID)
	delete(f.stopExitCodes, c.resp.ID)
	delete(f.stats, c.resp.ID)
	c.removed = true
	c.notify()
	f.emit(c, events.ActionDestroy, nil)
	return nil
}

// InspectContainer implements Client; the result shares no memory with the fake.
func (f *Fake) InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "InspectContainer"); err != nil {
		return nil, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return nil, err
	}
	return c.inspect(), nil
}

// InspectContainerSize implements Client.
func (f *Fake) InspectContainerSize(ctx context.Context, id string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "InspectContainerSize"); err != nil {
		return 0, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return 0, err
	}
	return c.sizeRw, nil
}

// SetContainerSize sets the bytes a container's writable layer holds.
func (f *Fake) SetContainerSize(id string, bytes int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	c.sizeRw = bytes
	return nil
}

func (c *fakeContainer) inspect() *container.InspectResponse {
	out := clone(c.resp)
	return &out
}

func (c *fakeContainer) summary() container.Summary {
	st := c.resp.State
	s := container.Summary{
		ID: c.resp.ID, Names: []string{c.resp.Name}, Image: c.resp.Config.Image, ImageID: c.resp.Image,
		Command: strings.Join(append([]string{c.resp.Path}, c.resp.Args...), " "),
		Created: c.created.Unix(), Labels: map[string]string{}, State: st.Status,
		Ports: []container.Port{}, Mounts: []container.MountPoint{},
	}
	for k, v := range c.resp.Config.Labels {
		s.Labels[k] = v
	}
	s.HostConfig.NetworkMode = string(c.resp.HostConfig.NetworkMode)
	switch {
	case st.Running:
		s.Status = "Up " + units.HumanDuration(time.Since(c.started))
	case c.started.IsZero():
		s.Status = "Created"
	default:
		s.Status = fmt.Sprintf("Exited (%d) %s ago", st.ExitCode, units.HumanDuration(time.Since(c.finished)))
	}
	return s
}

// sortedContainers returns containers oldest first, or newest first as Docker lists them.
func (f *Fake) sortedContainers(newestFirst bool) []*fakeContainer {
	out := make([]*fakeContainer, 0, len(f.containers))
	for _, c := range f.containers {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *fakeContainer) int {
		if newestFirst {
			return b.seq - a.seq
		}
		return a.seq - b.seq
	})
	return out
}

// validateFilters rejects keys outside emulated, so a test cannot pass because the fake
// ignored a filter that Docker would apply.
func validateFilters(args filters.Args, emulated ...string) error {
	for _, k := range args.Keys() {
		if !slices.Contains(emulated, k) {
			return dErr(cerrdefs.ErrInvalidArgument, "invalid filter '%s' (libdocker.Fake emulates %s)", k, strings.Join(emulated, ", "))
		}
	}
	return nil
}

// ListContainers implements Client, newest first. Filters use Docker's matching: id and name
// are unanchored regular expressions, label is key or key=value (all must match), status
// implies All, exited matches stopped containers by exit code (and, as in Docker, needs All).
func (f *Fake) ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ListContainers"); err != nil {
		return nil, err
	}
	fl := opts.Filters
	if err := validateFilters(fl, "id", "name", "label", "status", "exited"); err != nil {
		return nil, err
	}
	if opts.Since != "" || opts.Before != "" {
		return nil, dErr(cerrdefs.ErrInvalidArgument, "libdocker.Fake does not emulate Since/Before")
	}
	all := opts.All || opts.Limit > 0 || opts.Latest
	for _, s := range fl.Get("status") {
		if err := container.ValidateContainerState(container.ContainerState(s)); err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid filter 'status=%s': %v", s, err)
		}
		all = true
	}
	var exited []int
	for _, s := range fl.Get("exited") {
		code, err := strconv.Atoi(s)
		if err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid filter 'exited=%s'", s)
		}
		exited = append(exited, code)
	}
	limit := opts.Limit
	if opts.Latest {
		limit = 1
	}
	out := []container.Summary{}
	for _, c := range f.sortedContainers(true) {
		st := c.resp.State
		if !st.Running && !all {
			continue
		}
		if !fl.Match("name", c.resp.Name) && !fl.Match("name", strings.TrimPrefix(c.resp.Name, "/")) {
			continue
		}
		if !fl.Match("id", c.resp.ID) || !fl.MatchKVList("label", c.resp.Config.Labels) || !fl.Match("status", string(st.Status)) {
			continue
		}
		if len(exited) > 0 && (st.Running || c.started.IsZero() || !slices.Contains(exited, st.ExitCode)) {
			continue
		}
		out = append(out, c.summary())
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// NextPid is the PID the next started container or exec gets, for tests that lay out its
// /proc/PID files before the start.
func (f *Fake) NextPid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nextPid + 1
}
