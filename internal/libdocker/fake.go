package libdocker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
	units "github.com/docker/go-units"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Fake is an in-memory Client for unit tests. It emulates the Docker daemon's observable
// behaviour (runtime defaulting and validation, name rules, image resolution, state machine,
// error kinds and texts, list filters) rather than recording calls, so a test of the CRI layer
// fails when the code relies on something Docker would not do. All methods are safe for
// concurrent use; one mutex guards all state.
type Fake struct {
	mu sync.Mutex

	apiVersion    string
	negotiated    bool
	engine        string
	defaultRT     string
	runtimes      map[string]system.Runtime
	broken        map[string]bool
	cgroupDriver  string
	logConfig     container.LogConfig // daemon.json's log-driver and log-opts
	rootDir       string              // Info().DockerRootDir
	securityOpts  []string
	containers    map[string]*fakeContainer // by ID
	images        map[string]*image.InspectResponse
	pullable      map[string]image.InspectResponse // by familiar ref
	pullDelay     time.Duration
	lastPullAuth  registry.AuthConfig
	calls         map[string]int
	onceErrs      map[string][]error
	persistErrs   map[string]error
	hooks         map[string]func()
	afterHooks    map[string]func()
	seq, nextPid  int
	stopExitCodes map[string]int
	execs         map[string]*fakeExec
	execHandler   ExecHandler
	stopTimeouts  map[string]time.Duration
	// stats and events: fake_stats.go, fake_events.go
	stats            map[string]*fakeStats
	statsDelay       time.Duration
	statsInFlight    int
	statsMaxInFlight int
	subscribers      []*fakeSubscriber

	containerdStore bool // Docker's containerd image store (fake_imagestore.go)

	runtimeStatus map[string]map[string]string // Info().Runtimes[name].Status (API >= 1.44)
	runcCommit    string                       // Info().RuncCommit.ID
}

// fakeRuncCommit is what Docker 20.10 on Debian 12 reports as its default runtime's commit.
const fakeRuncCommit = "1.1.5+ds1-1+deb12u1"

type fakeContainer struct {
	seq      int
	resp     container.InspectResponse
	started  time.Time
	finished time.Time
	created  time.Time
	logs     []fakeLogMessage
	// changed is closed (and replaced) when logs grow or the container stops or goes away.
	changed chan struct{}
	removed bool
	sizeRw  int64 // the writable layer's bytes, as DiskUsage and an inspect with size tell
}

var _ Client = (*Fake)(nil)

// fakeShimName matches the containerd shim names Docker accepts unconfigured (io.containerd.NAME.vN).
var fakeShimName = regexp.MustCompile(`^io\.containerd\.[a-z0-9_-]+\.v[0-9]+$`)

// Engine versions for the API versions tests are likely to pin, so Version and Info agree.
var fakeEngineVersions = map[string]string{
	"1.41": "20.10.24", "1.43": "24.0.9", "1.44": "25.0.5", "1.45": "26.1.5", "1.46": "27.3.1",
	"1.47": "27.5.1", "1.48": "28.0.4", "1.49": "28.1.1", "1.50": "28.3.3", "1.51": "28.5.2",
}

// NewFake returns a daemon with the runtimes runc (default) and io.containerd.runc.v2, both
// "runc" from dockerd's PATH as Docker reports them, API version 1.41 (Docker 20.10), cgroupfs,
// and no images or containers.
func NewFake() *Fake {
	return &Fake{
		apiVersion: "1.41",
		engine:     fakeEngineVersions["1.41"],
		defaultRT:  "runc",
		runtimes: map[string]system.Runtime{
			"runc":                  {Path: "runc"},
			"io.containerd.runc.v2": {Path: "runc"},
		},
		runtimeStatus: map[string]map[string]string{},
		runcCommit:    fakeRuncCommit,
		broken:        map[string]bool{},
		cgroupDriver:  "cgroupfs",
		logConfig:     container.LogConfig{Type: "json-file"},
		rootDir:       "/var/lib/docker",
		securityOpts:  []string{"name=seccomp,profile=default", "name=cgroupns"},
		containers:    map[string]*fakeContainer{},
		images:        map[string]*image.InspectResponse{},
		pullable:      map[string]image.InspectResponse{},
		calls:         map[string]int{},
		onceErrs:      map[string][]error{},
		persistErrs:   map[string]error{},
		hooks:         map[string]func(){},
		afterHooks:    map[string]func(){},
		nextPid:       1000,
		stopExitCodes: map[string]int{},
	}
}

// --- configuration ---

// AddRuntime registers (or replaces) a runc-compatible runtime, as daemon.json "runtimes" does.
func (f *Fake) AddRuntime(name, path string, args ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runtimes[name] = system.Runtime{Path: path, Args: slices.Clone(args)}
}

// AddShimRuntime registers (or replaces) a runtime that daemon.json defines by its containerd
// shim, {"runtimeType": TYPE, "options": {...}} (Docker 23+): TYPE is a shim name such as
// io.containerd.runsc.v1 or a shim binary's path. Docker's /info reports such a runtime with
// neither path nor type, and no status.
func (f *Fake) AddShimRuntime(name, runtimeType string, options map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runtimes[name] = system.Runtime{Type: runtimeType, Options: options}
	delete(f.runtimeStatus, name)
}

// SetRuntimeStatus sets what Info reports as a runtime's status from API 1.44 (Docker 25) on:
// Docker puts there the OCI features it read from the runtime's binary ("BINARY features"),
// under "org.opencontainers.runtime-spec.features"; nil removes it.
func (f *Fake) SetRuntimeStatus(name string, status map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if status == nil {
		delete(f.runtimeStatus, name)
		return
	}
	f.runtimeStatus[name] = maps.Clone(status)
}

// SetRuncCommit sets Info().RuncCommit.ID: the commit Docker read from its default runtime's
// "--version" ("N/A" when it could not run or parse it; empty for a build without a commit).
func (f *Fake) SetRuncCommit(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runcCommit = id
}

// SetDefaultRuntime sets daemon.json "default-runtime". It panics on an unregistered runtime
// because a real daemon refuses to start with one.
func (f *Fake) SetDefaultRuntime(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.runtimes[name]; !ok {
		panic(fmt.Sprintf("libdocker.Fake: default runtime %q is not registered", name))
	}
	f.defaultRT = name
}

// BreakRuntime makes StartContainer fail for containers of runtime name the way Docker does
// when the runtime binary cannot be executed: a create with that runtime still succeeds.
func (f *Fake) BreakRuntime(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken[name] = true
}

// SetAPIVersion sets the daemon's API version (and the matching engine version for Version/Info).
func (f *Fake) SetAPIVersion(v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apiVersion = v
	f.engine = fakeEngineVersions[v]
	if f.engine == "" {
		f.engine = "0.0.0-fake"
	}
}

// SetDaemonLogConfig sets the daemon's log-driver and log-opts, as daemon.json does: Info
// reports the driver (never the options), and a container created without a log config of
// its own gets both.
func (f *Fake) SetDaemonLogConfig(driver string, opts map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logConfig = container.LogConfig{Type: driver, Config: maps.Clone(opts)}
}

// SetCgroupDriver sets Info().CgroupDriver ("cgroupfs" or "systemd").
func (f *Fake) SetCgroupDriver(driver string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cgroupDriver = driver
}

// SetDockerRootDir sets Info().DockerRootDir: tests that read the data root's filesystem point
// it at a directory of their own (a fresh machine has no /var/lib/docker).
func (f *Fake) SetDockerRootDir(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rootDir = dir
}

// SetSecurityOptions sets Info().SecurityOptions.
func (f *Fake) SetSecurityOptions(opts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.securityOpts = slices.Clone(opts)
}

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

// ExitContainer makes a running container's process exit on its own with code, as a crash would.
func (f *Fake) ExitContainer(idOrName string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return err
	}
	if !c.resp.State.Running {
		return fmt.Errorf("libdocker.Fake: container %s is not running", idOrName)
	}
	c.setStopped(code)
	f.emit(c, events.ActionDie, exitCodeAttr(code))
	return nil
}

// RestartingContainer makes a running container's process exit with code and leaves it as
// Docker does while a restart policy waits to start it again: status "restarting", Running and
// Restarting both true, no process. StopContainer ends that: the container is exited.
func (f *Fake) RestartingContainer(idOrName string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return err
	}
	if !c.resp.State.Running {
		return fmt.Errorf("libdocker.Fake: container %s is not running", idOrName)
	}
	c.setStopped(code)
	f.emit(c, events.ActionDie, exitCodeAttr(code))
	st := c.resp.State
	st.Status, st.Running, st.Restarting = container.StateRestarting, true, true
	return nil
}

// InjectError makes the next call of method (a Client method name, e.g. "StartContainer")
// fail with err, without side effects. Errors queue, each is used once; the error goes through
// the same classification as the real client's. It panics on a name that is not a Client method.
func (f *Fake) InjectError(method string, err error) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onceErrs[method] = append(f.onceErrs[method], err)
}

// InjectPersistentError makes every call of method fail with err until it is called again
// with a nil err. One-shot errors from InjectError are used first.
func (f *Fake) InjectPersistentError(method string, err error) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.persistErrs, method)
		return
	}
	f.persistErrs[method] = err
}

// OnCall runs fn at the start of every call of method, before the call looks at its context:
// a test cancels the caller's context there to stand for a deadline that expires while Docker
// works. fn runs with the Fake's lock held and must not call the Fake; a nil fn removes it.
func (f *Fake) OnCall(method string, fn func()) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.hooks, method)
		return
	}
	f.hooks[method] = fn
}

// AfterCall runs fn once a call of method has done its work, before it answers: a test cancels
// the caller's context there to stand for a caller that gave up while Docker finished. The call
// then answers the context's error, as the real client does, though Docker did the work. Only
// CreateContainer and StartContainer run it. fn runs with the Fake's lock held and must not
// call the Fake; a nil fn removes it.
func (f *Fake) AfterCall(method string, fn func()) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.afterHooks, method)
		return
	}
	f.afterHooks[method] = fn
}

// leave runs method's AfterCall hook and answers ctx's error if the caller has gone by then;
// f.mu must be held.
func (f *Fake) leave(ctx context.Context, method string) error {
	if fn := f.afterHooks[method]; fn != nil {
		fn()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// Calls returns how many times method was called, failed calls included.
func (f *Fake) Calls(method string) int {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// InfoCalls returns how many times Info was called; callers are expected to cache it.
func (f *Fake) InfoCalls() int { return f.Calls("Info") }

// ResetCalls zeroes all call counters, e.g. after a test's setup phase.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.calls)
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

func checkMethod(method string) {
	if _, ok := reflect.TypeFor[Client]().MethodByName(method); !ok {
		panic(fmt.Sprintf("libdocker.Fake: %q is not a Client method", method))
	}
}

// enter does what every Engine call has in common; f.mu must be held.
func (f *Fake) enter(ctx context.Context, method string) error {
	f.calls[method]++
	if fn := f.hooks[method]; fn != nil {
		fn()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	f.negotiated = true
	if q := f.onceErrs[method]; len(q) > 0 {
		f.onceErrs[method] = q[1:]
		return classify(q[0])
	}
	return classify(f.persistErrs[method])
}

// --- errors as the daemon and client shape them ---

// daemonError carries Docker's exact text (as the client prints it) and an errdefs kind.
type daemonError struct {
	msg  string
	kind error
}

func (e *daemonError) Error() string { return "Error response from daemon: " + e.msg }
func (e *daemonError) Unwrap() error { return e.kind }

func dErr(kind error, format string, args ...any) error {
	return &daemonError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// ConnectionFailed is the error of a call while dockerd is down, for InjectError: the real
// client's text over the dialer's *net.OpError, which is what a hijacked call (attach, exec)
// carries; libdocker's tests check that the real client's errors classify the same.
func ConnectionFailed(host string) error {
	return &connectionFailed{host: host, err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
}

type connectionFailed struct {
	host string
	err  error
}

func (e *connectionFailed) Error() string {
	return "Cannot connect to the Docker daemon at " + e.host + ". Is the docker daemon running?"
}
func (e *connectionFailed) Unwrap() error { return e.err }

func notFound(object, ref string) error {
	return dErr(cerrdefs.ErrNotFound, "No such %s: %s", object, ref)
}

// --- images ---

// FakeImage builds a realistic image (linux/amd64, command /bin/sh, 5 MB). An empty id gets a
// random one; user is the image's USER.
func FakeImage(id, user string, tags ...string) image.InspectResponse {
	if id == "" {
		id = randomID()
	}
	if !strings.HasPrefix(id, "sha256:") {
		id = "sha256:" + id
	}
	return image.InspectResponse{
		ID:           id,
		RepoTags:     slices.Clone(tags),
		Created:      time.Now().UTC().Format(time.RFC3339Nano),
		Architecture: "amd64",
		Os:           "linux",
		Size:         5 << 20,
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{
			User: user,
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:  []string{"/bin/sh"},
		}},
		RootFS: image.RootFS{Type: "layers", Layers: []string{"sha256:" + randomID()}},
	}
}

// AddImage stores img as if built, loaded or imported: it has only the RepoDigests given
// (a real Docker has none until a pull or push). RepoTags and RepoDigests are normalized the
// way Docker reports them ("busybox:latest"); a tag already on another image moves to img. It
// returns the image ID and panics on an invalid tag.
func (f *Fake) AddImage(img image.InspectResponse) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.storeImage(clone(img))
	f.emitImage(events.ActionLoad, id, id)
	return id
}

// AddPullable makes PullImage(ref) succeed and store img tagged with ref, with the repo digest
// a registry gives: REPOSITORY@DIGEST, DIGEST from img.RepoDigests or else derived from its ID.
func (f *Fake) AddPullable(ref string, img image.InspectResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img = clone(img)
	if img.ID == "" {
		img.ID = "sha256:" + randomID() // one image however often it is pulled
	}
	f.pullable[mustFamiliar(ref)] = img
}

// SetPullDelay makes each pull take d without progress, to exercise cancellation and the
// progress deadline.
func (f *Fake) SetPullDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pullDelay = d
}

// LastPullAuth returns the auth config of the most recent PullImage call.
func (f *Fake) LastPullAuth() registry.AuthConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastPullAuth
}

func (f *Fake) storeImage(img image.InspectResponse) string {
	if img.ID == "" {
		img.ID = "sha256:" + randomID()
	}
	if !strings.HasPrefix(img.ID, "sha256:") {
		img.ID = "sha256:" + img.ID
	}
	tags := img.RepoTags
	img.RepoTags = nil
	if f.containerdStore {
		tags, img.RepoDigests = append(tags, img.RepoDigests...), nil // digest names are names there
	}
	if old, ok := f.images[img.ID]; ok {
		img.RepoTags, img.RepoDigests = old.RepoTags, mergeUnique(old.RepoDigests, img.RepoDigests)
	}
	for i, d := range img.RepoDigests {
		img.RepoDigests[i] = mustFamiliar(d)
	}
	f.images[img.ID] = &img
	for _, t := range tags {
		f.tag(img.ID, mustFamiliar(t))
	}
	return img.ID
}

// tag points tag at id, taking it away from any other image (which may become dangling).
func (f *Fake) tag(id, tag string) {
	for _, other := range f.images {
		other.RepoTags = slices.DeleteFunc(other.RepoTags, func(t string) bool { return t == tag })
	}
	img := f.images[id]
	img.RepoTags = append(img.RepoTags, tag)
}

func mergeUnique(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// familiar normalizes a name reference as Docker's reference store does: "busybox" and
// "docker.io/library/busybox" both become "busybox:latest"; digests are kept.
func familiar(ref string) (string, error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", err
	}
	if _, ok := n.(reference.Canonical); ok {
		return reference.FamiliarString(n), nil
	}
	return reference.FamiliarString(reference.TagNameOnly(n)), nil
}

func mustFamiliar(ref string) string {
	s, err := familiar(ref)
	if err != nil {
		panic(fmt.Sprintf("libdocker.Fake: invalid image reference %q: %v", ref, err))
	}
	return s
}

// lookupImage resolves ref like the daemon's GetImage: a full digest is an ID; a name is
// looked up as a tag (":latest" added) or digest reference, then as an ID prefix.
func (f *Fake) lookupImage(ref string) (*image.InspectResponse, error) {
	parsed, err := reference.ParseAnyReference(ref)
	if err != nil {
		return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
	}
	named, ok := parsed.(reference.Named)
	if !ok {
		if img, ok := f.images[parsed.String()]; ok {
			return img, nil
		}
		return nil, notFound("image", parsed.String())
	}
	_, canonical := named.(reference.Canonical)
	want := reference.FamiliarString(reference.TagNameOnly(named))
	for _, img := range f.images {
		if (!canonical && slices.Contains(img.RepoTags, want)) || (canonical && f.hasRepoDigest(img, want)) {
			return img, nil
		}
	}
	prefix := strings.TrimPrefix(ref, "sha256:")
	var match *image.InspectResponse
	for id, img := range f.images {
		if strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), prefix) {
			if match != nil {
				match = nil // ambiguous: the daemon's search fails, so does the lookup
				break
			}
			match = img
		}
	}
	if match != nil && !canonical {
		return match, nil
	}
	return nil, notFound("image", want)
}

// InspectImage implements Client.
func (f *Fake) InspectImage(ctx context.Context, ref string) (*image.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "InspectImage"); err != nil {
		return nil, err
	}
	img, err := f.lookupImage(ref)
	if err != nil {
		return nil, err
	}
	out := f.inspectView(img)
	return &out, nil
}

// ListImages implements Client. It honours the "reference" and "dangling" filters and
// rejects filters it does not emulate rather than ignore them.
func (f *Fake) ListImages(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ListImages"); err != nil {
		return nil, err
	}
	if err := validateFilters(opts.Filters, "reference", "dangling"); err != nil {
		return nil, err
	}
	var out []image.Summary
	for _, img := range f.sortedImages() {
		if opts.Filters.Contains("dangling") {
			if opts.Filters.ExactMatch("dangling", "true") != (len(img.RepoTags) == 0) {
				continue
			}
		}
		if opts.Filters.Contains("reference") && !matchesReference(opts.Filters.Get("reference"), img.RepoTags) {
			continue
		}
		out = append(out, f.imageSummary(img, -1))
	}
	return out, nil
}

func matchesReference(patterns, tags []string) bool {
	for _, p := range patterns {
		for _, t := range tags {
			n, err := reference.ParseNormalizedNamed(t)
			if err != nil {
				continue
			}
			if ok, _ := reference.FamiliarMatch(p, n); ok {
				return true
			}
		}
	}
	return false
}

func (f *Fake) imageSummary(img *image.InspectResponse, containers int64) image.Summary {
	s := image.Summary{
		ID: img.ID, RepoTags: slices.Clone(img.RepoTags), RepoDigests: slices.Clone(img.RepoDigests),
		Size: img.Size, SharedSize: -1, Containers: containers, Labels: map[string]string{},
	}
	if f.containerdStore {
		s.RepoDigests = containerdListDigests(img)
	}
	if s.RepoTags == nil {
		s.RepoTags = []string{}
	}
	if s.RepoDigests == nil {
		s.RepoDigests = []string{}
	}
	if t, err := time.Parse(time.RFC3339Nano, img.Created); err == nil {
		s.Created = t.Unix()
	}
	if img.Config != nil {
		for k, v := range img.Config.Labels {
			s.Labels[k] = v
		}
	}
	return s
}

func (f *Fake) sortedImages() []*image.InspectResponse {
	out := make([]*image.InspectResponse, 0, len(f.images))
	for _, img := range f.images {
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b *image.InspectResponse) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PullImage implements Client.
func (f *Fake) PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error {
	f.mu.Lock()
	if err := f.enter(ctx, "PullImage"); err != nil {
		f.mu.Unlock()
		return err
	}
	f.lastPullAuth = auth
	delay := f.pullDelay
	f.mu.Unlock()

	if delay > 0 {
		wait, stalled := delay, false
		if progressDeadline > 0 && progressDeadline < delay {
			wait, stalled = progressDeadline, true
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("pull %s: %w", ref, context.Cause(ctx))
		case <-timer.C:
			if stalled {
				return fmt.Errorf("pull %s: %w", ref, noProgressError(progressDeadline, nil))
			}
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	want, err := familiar(ref)
	if err != nil {
		return dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
	}
	img, ok := f.pullable[want]
	if !ok {
		return f.pullNotFound(want)
	}
	f.pulledNames(&img, want)
	f.storeImage(clone(img))
	f.emitImage(events.ActionPull, want, want)
	return nil
}

// manifestDigest is the digest the fake registry serves img's manifest under: the one in its
// first RepoDigests, else one derived from its ID, so that every pull of img reports the same.
func manifestDigest(img image.InspectResponse) string {
	for _, d := range img.RepoDigests {
		if _, dg, ok := strings.Cut(d, "@"); ok {
			return dg
		}
	}
	sum := sha256.Sum256([]byte("manifest of " + img.ID))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pullNotFound words the failure as a registry would: a known repository lacks the tag,
// an unknown one is "access denied".
func (f *Fake) pullNotFound(want string) error {
	n, _ := reference.ParseNormalizedNamed(want)
	repo := reference.FamiliarName(n)
	for p := range f.pullable {
		pn, _ := reference.ParseNormalizedNamed(p)
		if reference.FamiliarName(pn) == repo {
			return dErr(cerrdefs.ErrNotFound, "manifest for %s not found: manifest unknown: manifest unknown", want)
		}
	}
	return dErr(cerrdefs.ErrNotFound, "pull access denied for %s, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", repo)
}

// RemoveImage implements Client with the daemon's ImageDelete rules, and its untag and delete
// events.
func (f *Fake) RemoveImage(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	records, err := f.removeImageLocked(ctx, ref, opts)
	for _, r := range records {
		if r.Untagged != "" {
			f.emitImage(events.ActionUnTag, r.Untagged, r.Untagged)
		}
		if r.Deleted != "" {
			f.emitImage(events.ActionDelete, r.Deleted, r.Deleted)
		}
	}
	return records, err
}

func (f *Fake) removeImageLocked(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	if err := f.enter(ctx, "RemoveImage"); err != nil {
		return nil, err
	}
	img, err := f.lookupImage(ref)
	if err != nil {
		return nil, err
	}
	id := img.ID
	var records []image.DeleteResponse
	running, stopped := f.imageUsers(id)
	byID := strings.HasPrefix(id, ref) || strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), ref)
	if !byID {
		if !opts.Force && len(img.RepoTags) <= 1 {
			if c := firstNonNil(running, stopped); c != nil {
				return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to remove repository reference %q (must force) - container %s is using its referenced image %s", ref, short(c.resp.ID), short(id))
			}
		}
		tag, err := familiar(ref)
		if err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
		}
		if strings.Contains(tag, "@") && !f.containerdStore {
			img.RepoDigests = slices.DeleteFunc(img.RepoDigests, func(d string) bool { return d == tag })
		} else {
			img.RepoTags = slices.DeleteFunc(img.RepoTags, func(t string) bool { return t == tag })
		}
		records = append(records, image.DeleteResponse{Untagged: tag})
		if len(img.RepoTags) > 0 {
			return records, nil
		}
		if running != nil || stopped != nil {
			return records, nil // in use: the daemon leaves the image dangling, quietly
		}
	} else {
		if running != nil {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (cannot be forced) - image is being used by running container %s", short(id), short(running.resp.ID))
		}
		if !opts.Force && len(img.RepoTags) > 1 {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (must be forced) - image is referenced in multiple repositories", short(id))
		}
		if !opts.Force && stopped != nil {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (must be forced) - image is being used by stopped container %s", short(id), short(stopped.resp.ID))
		}
	}
	for _, t := range append(img.RepoTags, img.RepoDigests...) {
		records = append(records, image.DeleteResponse{Untagged: t})
	}
	delete(f.images, id)
	records = append(records, image.DeleteResponse{Deleted: id})
	return records, nil
}

func firstNonNil(a, b *fakeContainer) *fakeContainer {
	if a != nil {
		return a
	}
	return b
}

func (f *Fake) imageUsers(id string) (running, stopped *fakeContainer) {
	for _, c := range f.sortedContainers(false) {
		if c.resp.Image != id {
			continue
		}
		if c.resp.State.Running && running == nil {
			running = c
		} else if !c.resp.State.Running && stopped == nil {
			stopped = c
		}
	}
	return running, stopped
}

// DiskUsage implements Client; image Containers counts the containers using each image.
func (f *Fake) DiskUsage(ctx context.Context, opts types.DiskUsageOptions) (types.DiskUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "DiskUsage"); err != nil {
		return types.DiskUsage{}, err
	}
	want := func(o types.DiskUsageObject) bool { return len(opts.Types) == 0 || slices.Contains(opts.Types, o) }
	var du types.DiskUsage
	if want(types.ImageObject) {
		du.Images = []*image.Summary{}
		for _, img := range f.sortedImages() {
			var n int64
			for _, c := range f.containers {
				if c.resp.Image == img.ID {
					n++
				}
			}
			s := f.imageSummary(img, n)
			du.Images = append(du.Images, &s)
			du.LayersSize += img.Size
		}
	}
	if want(types.ContainerObject) {
		du.Containers = []*container.Summary{}
		for _, c := range f.sortedContainers(true) {
			s := c.summary()
			s.SizeRw = c.sizeRw
			du.Containers = append(du.Containers, &s)
		}
	}
	return du, nil
}

// --- system ---

// Ping implements Client.
func (f *Fake) Ping(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enter(ctx, "Ping")
}

// APIVersion implements Client. As the real client with negotiation, it reports the client's
// own default version until the first call to the daemon has negotiated the daemon's.
func (f *Fake) APIVersion() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["APIVersion"]++
	if !f.negotiated {
		return api.DefaultVersion
	}
	if versions.LessThan(api.DefaultVersion, f.apiVersion) {
		return api.DefaultVersion
	}
	return f.apiVersion
}

// Version implements Client.
func (f *Fake) Version(ctx context.Context) (types.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Version"); err != nil {
		return types.Version{}, err
	}
	return types.Version{
		Version: f.engine, APIVersion: f.apiVersion, MinAPIVersion: "1.12",
		Os: "linux", Arch: "amd64", KernelVersion: "6.1.0-fake", GoVersion: "go1.26",
	}, nil
}

// Info implements Client.
func (f *Fake) Info(ctx context.Context) (system.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Info"); err != nil {
		return system.Info{}, err
	}
	driver, driverStatus := f.storeDriver()
	info := system.Info{
		ID: "FAKE:DOCKER", Name: "fake-docker", ServerVersion: f.engine,
		OSType: "linux", OperatingSystem: "Fake Linux", Architecture: "x86_64", KernelVersion: "6.1.0-fake",
		Driver: driver, DriverStatus: driverStatus, DockerRootDir: f.rootDir, CgroupDriver: f.cgroupDriver, CgroupVersion: "2",
		DefaultRuntime: f.defaultRT, Runtimes: map[string]system.RuntimeWithStatus{}, LoggingDriver: f.logConfig.Type,
		SecurityOptions: slices.Clone(f.securityOpts), Images: len(f.images), Containers: len(f.containers),
	}
	// From API 1.46 Docker says which containerd it uses (the containerd image store talks to
	// it for images and snapshots too).
	if versions.GreaterThanOrEqualTo(f.apiVersion, "1.46") {
		info.Containerd = &system.ContainerdInfo{Address: "/run/containerd/containerd.sock", Namespaces: system.ContainerdNamespaces{Containers: "moby", Plugins: "plugins.moby"}}
	}
	// Docker reports a runtime's path and args only, never its runtimeType or options; the
	// status from API 1.44 on.
	for name, rt := range f.runtimes {
		reported := system.RuntimeWithStatus{Runtime: system.Runtime{Path: rt.Path, Args: slices.Clone(rt.Args)}}
		if st, ok := f.runtimeStatus[name]; ok && versions.GreaterThanOrEqualTo(f.apiVersion, "1.44") {
			reported.Status = maps.Clone(st)
		}
		info.Runtimes[name] = reported
	}
	info.RuncCommit = system.Commit{ID: f.runcCommit}
	for _, c := range f.containers {
		if c.resp.State.Running {
			info.ContainersRunning++
		} else {
			info.ContainersStopped++
		}
	}
	return info, nil
}

// --- containers ---

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

// --- helpers ---

func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// clone deep-copies through JSON, which is what a real client's caller receives anyway.
func clone[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("libdocker.Fake: clone: %v", err))
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("libdocker.Fake: clone: %v", err))
	}
	return out
}
