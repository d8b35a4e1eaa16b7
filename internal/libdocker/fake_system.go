package libdocker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/docker/docker/api"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
)

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
		ExperimentalBuild: f.experimental,
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
