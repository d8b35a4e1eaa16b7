package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// How a RuntimeClass handler becomes a Docker runtime:
//
//   - "" or the default handler name ("docker"): the daemon's default runtime (HostConfig.Runtime
//     left empty, so Docker applies its own default).
//   - a name in the alias table (--runtime-handler NAME=DOCKER_RUNTIME): that Docker runtime.
//     Handler names are RFC 1123 labels; aliases give containerd shim names such as
//     io.containerd.spin.v2 a name a RuntimeClass can hold.
//   - any other name: the Docker runtime of the same name.
//
// The Docker runtime must be one that Docker reports in GET /info, except shim names
// io.containerd.NAME.vN, which daemons with Engine API >= 1.42 run without configuration.
// /info is cached: a pod never costs an /info call unless its runtime is missing from the cache,
// and then at most one refresh per interval runs, shared by all concurrent callers.

// shimName matches containerd shim v2 runtime names.
var shimName = regexp.MustCompile(`^io\.containerd\.[a-z0-9_-]+\.v[0-9]+$`)

// podRuntime is the runtime a pod runs on.
type podRuntime struct {
	// Handler is the RuntimeClass handler as requested ("" for the default).
	Handler string
	// DockerRuntime is what goes into HostConfig.Runtime ("" = Docker's default).
	DockerRuntime string
}

// dockerInfo is a snapshot of GET /info with the Engine API version it came with.
type dockerInfo struct {
	system.Info
	APIVersion string
	fetched    time.Time
}

func (i *dockerInfo) knows(runtime string) bool {
	if _, ok := i.Runtimes[runtime]; ok {
		return true
	}
	return shimName.MatchString(runtime) && featuresOf(i.APIVersion).shimNames
}

// runscBehindRuncShim reports whether Docker runs runtime (a HostConfig.Runtime; "" for the
// daemon's default) as gVisor's runsc under containerd's runc shim: a daemon.json runtime whose
// path is runsc. Docker reports no path for shim v2 runtimes, so those are never matched.
func (i *dockerInfo) runscBehindRuncShim(runtime string) bool {
	return i.runscPath(runtime) != ""
}

// runscPath is the path of runtime's runsc binary when runscBehindRuncShim, "" otherwise.
func (i *dockerInfo) runscPath(runtime string) string {
	if runtime == "" {
		runtime = i.DefaultRuntime
	}
	if r, ok := i.Runtimes[runtime]; ok && r.Path != "" && strings.HasPrefix(filepath.Base(r.Path), "runsc") {
		return r.Path
	}
	return ""
}

func (i *dockerInfo) names() string {
	names := make([]string, 0, len(i.Runtimes))
	for name := range i.Runtimes {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// runtimeCache holds Docker's /info; refreshes are single-flight and rate limited.
type runtimeCache struct {
	docker      libdocker.Client
	minInterval time.Duration

	mu       sync.Mutex
	info     *dockerInfo
	inflight chan struct{} // closed when the running refresh ends
	lastErr  error
}

func newRuntimeCache(docker libdocker.Client, minInterval time.Duration) *runtimeCache {
	return &runtimeCache{docker: docker, minInterval: minInterval}
}

// get returns the cached info, fetching it the first time.
func (c *runtimeCache) get(ctx context.Context) (*dockerInfo, error) {
	c.mu.Lock()
	info := c.info
	c.mu.Unlock()
	if info != nil {
		return info, nil
	}
	return c.refresh(ctx)
}

// getFresh returns info no older than maxAge, refreshing it when needed.
func (c *runtimeCache) getFresh(ctx context.Context, maxAge time.Duration) (*dockerInfo, error) {
	c.mu.Lock()
	info := c.info
	c.mu.Unlock()
	if info != nil && time.Since(info.fetched) < maxAge {
		return info, nil
	}
	return c.refresh(ctx)
}

// cached returns the info last fetched, however old; nil before the first fetch.
func (c *runtimeCache) cached() *dockerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// refresh fetches /info again. Concurrent callers share one fetch, and a fetch younger than
// minInterval is returned as it is, so a burst of pods with an unknown handler cannot flood
// dockerd with /info calls. The fetch outlives a caller that gives up (others may wait on it),
// and each caller waits only as long as its own context allows.
func (c *runtimeCache) refresh(ctx context.Context) (*dockerInfo, error) {
	c.mu.Lock()
	if c.info != nil && time.Since(c.info.fetched) < c.minInterval {
		info := c.info
		c.mu.Unlock()
		return info, nil
	}
	wait := c.inflight
	if wait == nil {
		wait = make(chan struct{})
		c.inflight = wait
		go c.fetch(context.WithoutCancel(ctx), wait)
	}
	c.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil {
		return nil, c.lastErr
	}
	return c.info, nil
}

// fetch asks Docker for /info, bounded by 30 s, keeps the answer and closes done.
func (c *runtimeCache) fetch(ctx context.Context, done chan struct{}) {
	fetchCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	raw, err := c.docker.Info(fetchCtx)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight = nil
	c.lastErr = err
	if err == nil {
		c.info = &dockerInfo{Info: raw, APIVersion: c.docker.APIVersion(), fetched: time.Now()}
	}
	close(done)
}

// resolveHandler turns a RuntimeClass handler into the Docker runtime to use. It fails, before
// anything is created, when Docker does not know that runtime.
func (s *Service) resolveHandler(ctx context.Context, handler string) (podRuntime, error) {
	if handler == "" || handler == s.opts.DefaultRuntimeHandler {
		return podRuntime{Handler: handler}, nil
	}
	dockerRuntime, aliased := s.opts.RuntimeHandlerAliases[handler]
	if !aliased {
		if len(handler) > 63 {
			return podRuntime{}, invalidf("runtime handler %q is longer than 63 characters", handler)
		}
		dockerRuntime = handler
	}
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return podRuntime{}, dockerError(err, "runtime handler %q: read Docker's runtimes", handler)
	}
	if !info.knows(dockerRuntime) {
		// The runtime may have been added since (daemon.json + SIGHUP): look again, rate limited.
		if info, err = s.runtimes.refresh(ctx); err != nil {
			return podRuntime{}, dockerError(err, "runtime handler %q: read Docker's runtimes", handler)
		}
	}
	if !info.knows(dockerRuntime) {
		return podRuntime{}, unknownHandlerError(handler, dockerRuntime, aliased, info)
	}
	return podRuntime{Handler: handler, DockerRuntime: dockerRuntime}, nil
}

func unknownHandlerError(handler, dockerRuntime string, aliased bool, info *dockerInfo) error {
	what := fmt.Sprintf("runtime handler %q", handler)
	if aliased {
		what += fmt.Sprintf(" (alias of Docker runtime %q)", dockerRuntime)
	}
	hint := fmt.Sprintf(`add it to "runtimes" in /etc/docker/daemon.json, e.g. {"runtimes": {%q: {"path": "/usr/local/bin/RUNTIME"}}}, and reload dockerd (kill -HUP)`, dockerRuntime)
	if !aliased {
		hint += ", or map the handler to a runtime Docker knows with --runtime-handler " + handler + "=DOCKER_RUNTIME"
	}
	return status.Errorf(codes.InvalidArgument, "%s: Docker has no runtime %q (Docker knows: %s); %s",
		what, dockerRuntime, info.names(), hint)
}

// runtimeFailure explains a create or start that failed inside the OCI runtime. Docker's own
// message ("OCI runtime create failed: ... fork/exec /path: permission denied") names neither the
// handler nor what is wrong, so look at the runtime's binary ourselves. When the binary looks
// fine, the runtime's own words in Docker's text say what it or the kernel refused: the answer is
// one line with the handler, the runtime, that cause (the runtime's words quoted) and the fix
// where it is known. Docker's whole text goes to our log.
func (s *Service) runtimeFailure(ctx context.Context, err error, what string, rt podRuntime) error {
	if !errors.Is(err, libdocker.ErrRuntimeFailed) {
		return dockerError(err, "%s", what)
	}
	name := rt.DockerRuntime
	path, cause := "", ""
	if info, ierr := s.runtimes.get(ctx); ierr == nil {
		if name == "" {
			name = info.DefaultRuntime
		}
		if r, ok := info.Runtimes[name]; ok && r.Path != "" {
			path = r.Path
			cause = runtimePathProblem(r.Path)
		}
	}
	handler := rt.Handler
	if handler == "" {
		handler = "(default)"
	}
	if cause != "" {
		return status.Errorf(codes.FailedPrecondition, "%s: runtime handler %q (Docker runtime %q) cannot run containers: %s; fix the runtime's entry in /etc/docker/daemon.json and reload dockerd",
			what, handler, name, cause)
	}
	s.log.WithFields(map[string]any{"handler": handler, "docker_runtime": name}).Warnf("%s: Docker: %v", what, err)
	runtime := fmt.Sprintf("Docker runtime %q", name)
	if path != "" {
		runtime += ", " + path
	}
	r := explainRuntimeError(err.Error(), func() string { return cgroupV2Controllers(unifiedCgroupRoot) })
	msg := fmt.Sprintf("%s: runtime handler %q (%s): %s", what, handler, runtime, r.cause)
	if r.fix != "" {
		msg += "; " + r.fix
	}
	return status.Error(codes.FailedPrecondition, msg)
}

// refusal is what a runtime or the kernel refused, and the fix when it is known.
type refusal struct {
	cause string
	fix   string
}

// refusals read the runtime's own words in Docker's error text. Each pattern comes from a
// message captured from the runtime (runtime_failure_test.go holds them verbatim); the first
// match wins. Each cause quotes the runtime's words, so that they can still be searched for.
var refusals = []struct {
	re      *regexp.Regexp
	explain func(m []string, v2Controllers func() string) refusal
}{
	// gVisor, --network=sandbox (its default): runsc releases before the fix of gVisor issue
	// 10704 take /proc/sys/net/core/rmem_default for a sign of the host's namespace, and Linux
	// 6.x kernels have it in every network namespace.
	{regexp.MustCompile(`cannot run with network enabled in root network namespace`), func([]string, func() string) refusal {
		return refusal{
			cause: `gVisor's --network=sandbox took the pod's network namespace for the host's ("cannot run with network enabled in root network namespace": runsc releases without the fix of gVisor issue 10704 do so for every namespace on Linux 6.x kernels)`,
			fix:   `give the runtime "runtimeArgs": ["--network=host"] in /etc/docker/daemon.json and reload dockerd (kill -HUP)`,
		}
	}},
	{regexp.MustCompile(`cgroups in hybrid mode not supported, drop all controllers from cgroupv2`), func(_ []string, v2Controllers func() string) refusal {
		cause := `crun refuses this node's cgroups ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"): cgroup v1 with controllers on the cgroup v2 hierarchy too`
		if c := v2Controllers(); c != "" {
			cause += " (" + unifiedCgroupRoot + ": " + c + ")"
		}
		return refusal{cause: cause, fix: "boot the node with cgroup v2 alone (systemd.unified_cgroup_hierarchy=1) or with no controller on cgroup v2, or run these pods on runc"}
	}},
	{regexp.MustCompile(`OCI runtime create failed: unknown version specified`), func([]string, func() string) refusal {
		return refusal{cause: `the runtime does not know the version of the OCI spec this Docker writes ("unknown version specified": crun 1.8 says so of Docker 29's 1.3.0)`, fix: "install a newer release of the runtime"}
	}},
	{regexp.MustCompile(`exec: "([^"]*)": executable file not found in \$PATH`), func(m []string, _ func() string) refusal {
		return refusal{cause: fmt.Sprintf(`the container's command %q is not in the image's $PATH ("executable file not found in $PATH")`, m[1]), fix: "fix the container's command or the image's entrypoint"}
	}},
	{regexp.MustCompile(`exec: "([^"]*)": stat [^:]*: no such file or directory`), func(m []string, _ func() string) refusal {
		return refusal{cause: fmt.Sprintf(`the container's command %q does not exist in the image ("no such file or directory")`, m[1]), fix: "fix the container's command or the image's entrypoint"}
	}},
	{regexp.MustCompile(`exec: "([^"]*)": (is a directory: )?permission denied`), func(m []string, _ func() string) refusal {
		return refusal{cause: fmt.Sprintf(`the container's command %q cannot be executed ("permission denied": a directory, or a file without the execute bit)`, m[1]), fix: "fix the container's command or the image's entrypoint"}
	}},
	{regexp.MustCompile(`unable to apply caps: operation not permitted`), func([]string, func() string) refusal {
		return refusal{cause: `the node cannot grant the capabilities the container asks for ("unable to apply caps: operation not permitted"): privileged, or added capabilities beyond the node's bounding set, as under rootless or nested Docker`}
	}},
	{regexp.MustCompile(`failed to update /proc/self/oom_score_adj: Permission denied`), func([]string, func() string) refusal {
		return refusal{cause: `the node cannot give the container its negative oom_score_adj ("failed to update /proc/self/oom_score_adj: Permission denied"): it lacks CAP_SYS_RESOURCE, as under rootless or nested Docker`}
	}},
	{regexp.MustCompile(`can't get final child's PID from pipe: EOF`), func([]string, func() string) refusal {
		return refusal{cause: `runc's init process died before the container started ("can't get final child's PID from pipe: EOF"), as it does for a negative oom_score_adj on a node without CAP_SYS_RESOURCE (rootless or nested Docker)`}
	}},
	// The sysctl's file: /proc/sys/a/b (runc 1.1), or "sysctl a.b file" (runc 1.2+).
	{regexp.MustCompile(`open (?:/proc/sys/([^\s:]+)|sysctl (\S+) file): .*no such file or directory`), func(m []string, _ func() string) refusal {
		name := m[2]
		if name == "" {
			name = strings.ReplaceAll(m[1], "/", ".")
		}
		return refusal{cause: fmt.Sprintf(`the kernel has no sysctl %s in the pod's namespaces ("no such file or directory")`, name), fix: "remove it from the pod's securityContext.sysctls"}
	}},
	{regexp.MustCompile(`error mounting "([^"]*)" to rootfs at "([^"]*)".*: not a directory`), func(m []string, _ func() string) refusal {
		return refusal{cause: fmt.Sprintf(`the mount of %q at %q puts a file onto a directory or a directory onto a file ("not a directory")`, m[1], m[2]), fix: "check the volume's host path and the mount path"}
	}},
}

// dockerErrorPrefixes are the layers of Docker's, containerd's and runc's own wording around
// a runtime's message, outermost first.
var dockerErrorPrefixes = []string{
	"Error response from daemon: ",
	"failed to create task for container: ",
	"failed to create shim task: ",
	"OCI runtime create failed: ",
	"OCI runtime start failed: ",
	"runc create failed: ",
	"unable to start container process: ",
	"error during container init: ",
}

// explainRuntimeError says what a runtime or the kernel refused, from Docker's error text.
// Without a known refusal, the cause is the runtime's innermost message, without the layers
// Docker, containerd and runc put around it.
func explainRuntimeError(msg string, v2Controllers func() string) refusal {
	for _, r := range refusals {
		if m := r.re.FindStringSubmatch(msg); m != nil {
			return r.explain(m, v2Controllers)
		}
	}
	inner := strings.TrimSpace(msg)
	for stripped := true; stripped; {
		stripped = false
		for _, p := range dockerErrorPrefixes {
			if rest, ok := strings.CutPrefix(inner, p); ok {
				inner, stripped = rest, true
			}
		}
	}
	inner = strings.TrimSuffix(inner, ": unknown")
	return refusal{cause: "the runtime failed: " + strings.Join(strings.Fields(inner), " ")}
}

// unifiedCgroupRoot is where a cgroup v1 node mounts the cgroup v2 hierarchy (systemd's hybrid
// layout).
const unifiedCgroupRoot = "/sys/fs/cgroup/unified"

// cgroupV2Controllers lists the controllers enabled on the cgroup v2 hierarchy mounted at root
// (what crun's hybrid-mode refusal is about), "" when there is none or no such mount.
func cgroupV2Controllers(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// runtimePathProblem says what is wrong with a runtime binary, from this node's point of view.
func runtimePathProblem(path string) string {
	if !filepath.IsAbs(path) {
		// Docker looks a bare name up in its own PATH, which we cannot see: only judge what
		// ours finds.
		found, err := exec.LookPath(path)
		if err != nil {
			return ""
		}
		path = found
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("its path %s does not exist", path)
	case err != nil:
		return fmt.Sprintf("its path %s cannot be read: %v", path, err)
	case fi.IsDir():
		return fmt.Sprintf("its path %s is a directory, not an executable", path)
	case fi.Mode()&0o111 == 0:
		return fmt.Sprintf("its path %s is not executable", path)
	}
	return ""
}
