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

	"github.com/cri-dockerd/cri-dockerd/libdocker"
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

// refresh fetches /info again. Concurrent callers share one fetch, and a fetch younger than
// minInterval is returned as it is, so a burst of pods with an unknown handler cannot flood
// dockerd with /info calls.
func (c *runtimeCache) refresh(ctx context.Context) (*dockerInfo, error) {
	c.mu.Lock()
	if c.info != nil && time.Since(c.info.fetched) < c.minInterval {
		info := c.info
		c.mu.Unlock()
		return info, nil
	}
	if wait := c.inflight; wait != nil {
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
	done := make(chan struct{})
	c.inflight = done
	c.mu.Unlock()

	// The fetch outlives a cancelled caller: others may be waiting on it.
	fetchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	raw, err := c.docker.Info(fetchCtx)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight = nil
	c.lastErr = err
	close(done)
	if err != nil {
		return nil, err
	}
	c.info = &dockerInfo{Info: raw, APIVersion: c.docker.APIVersion(), fetched: time.Now()}
	return c.info, nil
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
// fine the cause lies elsewhere (capabilities, mounts...): Docker's message is then the answer,
// with the handler added.
func (s *Service) runtimeFailure(ctx context.Context, err error, what string, rt podRuntime) error {
	if !errors.Is(err, libdocker.ErrRuntimeFailed) {
		return dockerError(err, "%s", what)
	}
	name := rt.DockerRuntime
	cause := ""
	if info, ierr := s.runtimes.get(ctx); ierr == nil {
		if name == "" {
			name = info.DefaultRuntime
		}
		if r, ok := info.Runtimes[name]; ok && r.Path != "" {
			cause = runtimePathProblem(r.Path)
		}
	}
	handler := rt.Handler
	if handler == "" {
		handler = "(default)"
	}
	if cause == "" {
		return dockerError(err, "%s (runtime handler %q, Docker runtime %q)", what, handler, name)
	}
	return status.Errorf(codes.FailedPrecondition, "%s: runtime handler %q (Docker runtime %q) cannot run containers: %s; fix the runtime's entry in /etc/docker/daemon.json and reload dockerd",
		what, handler, name, cause)
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
