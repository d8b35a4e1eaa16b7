// Package libdocker is the only package that talks to the Docker Engine API. It exposes the
// narrow set of Engine calls cri-dockerd needs, each bound to the caller's context and a timeout,
// and classifies Docker's errors (not found, conflict, unknown runtime, runtime cannot start)
// so that callers never parse error strings.
package libdocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
	dockerclient "github.com/docker/docker/client"
	"github.com/sirupsen/logrus"
)

// Client is the subset of the Docker Engine API that cri-dockerd uses.
type Client interface {
	StreamingClient
	LogClient
	StatsClient
	EventsClient
	CheckpointClient

	Ping(ctx context.Context) error
	// APIVersion is the Engine API version negotiated with the daemon (the client's own before the first call).
	APIVersion() string
	Version(ctx context.Context) (types.Version, error)
	Info(ctx context.Context) (system.Info, error)

	CreateContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	// StopContainer sends SIGTERM, then SIGKILL after timeout (0: kill at once).
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	RemoveContainer(ctx context.Context, id string, opts container.RemoveOptions) error
	InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error)
	// InspectContainerSize is the bytes of a container's writable layer (an inspect with
	// size, which makes Docker measure that layer alone).
	InspectContainerSize(ctx context.Context, id string) (int64, error)
	ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	// StatContainerPath stats path in a container's filesystem (the archive API), which makes
	// Docker set up the container's mounts as it does to start it: a created container's image
	// sub paths are resolved (ErrSubpathNotFound, ErrSubpathInvalid) without starting it.
	StatContainerPath(ctx context.Context, id, path string) (container.PathStat, error)

	// CreateExec prepares a process in a running container; AttachExec starts it and returns
	// its multiplexed output stream; InspectExec reports its state and exit code.
	CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error)
	AttachExec(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	InspectExec(ctx context.Context, execID string) (container.ExecInspect, error)
	// KillExec kills an exec'd process that is still running. Docker has no API for it, so the
	// real client signals the process's host PID: cri-dockerd runs on Docker's node.
	KillExec(ctx context.Context, execID string) error

	InspectImage(ctx context.Context, ref string) (*image.InspectResponse, error)
	ListImages(ctx context.Context, opts image.ListOptions) ([]image.Summary, error)
	// PullImage pulls ref. It fails when Docker reports no progress for progressDeadline
	// before a layer extracts (0: no deadline).
	PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error
	RemoveImage(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error)
	DiskUsage(ctx context.Context, opts types.DiskUsageOptions) (types.DiskUsage, error)
}

// Options configure the real client.
type Options struct {
	// Endpoint is the Docker daemon address, e.g. unix:///var/run/docker.sock. Empty: DOCKER_HOST or the default.
	Endpoint string
	// RequestTimeout bounds every call except image pulls (those are bounded by progress).
	RequestTimeout time.Duration
	// WrapTransport, when set, wraps the HTTP transport to Docker (e.g. to time each call).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Logger receives the progress of image pulls; nil discards it.
	Logger *logrus.Entry
}

type client struct {
	api     *dockerclient.Client
	timeout time.Duration
	log     *logrus.Entry
	// pullReportInterval is pullReportInterval, shorter in tests.
	pullReportInterval time.Duration
}

// New opens a client for the Docker daemon with API version negotiation on, so that the same
// binary works against Docker 20.10 (API 1.41) and newer daemons.
func New(opts Options) (Client, error) {
	clientOpts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if opts.Endpoint != "" {
		clientOpts = append(clientOpts, dockerclient.WithHost(opts.Endpoint))
	}
	if opts.WrapTransport != nil {
		// Last: the transport is configured for the endpoint by now.
		clientOpts = append(clientOpts, func(c *dockerclient.Client) error {
			hc := c.HTTPClient()
			hc.Transport = opts.WrapTransport(hc.Transport)
			return dockerclient.WithHTTPClient(hc)(c)
		})
	}
	api, err := dockerclient.NewClientWithOpts(clientOpts...)
	if err != nil {
		return nil, err
	}
	timeout := opts.RequestTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		log = logrus.NewEntry(discard)
	}
	return &client{api: api, timeout: timeout, log: log, pullReportInterval: pullReportInterval}, nil
}

func (c *client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

func (c *client) APIVersion() string { return c.api.ClientVersion() }

func (c *client) Ping(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err := c.api.Ping(ctx)
	return classify(err)
}

func (c *client) Version(ctx context.Context) (types.Version, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	v, err := c.api.ServerVersion(ctx)
	return v, classify(err)
}

func (c *client) Info(ctx context.Context) (system.Info, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	info, err := c.api.Info(ctx)
	return info, classify(err)
}

func (c *client) CreateContainer(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		return "", classify(err)
	}
	return resp.ID, nil
}

func (c *client) StartContainer(ctx context.Context, id string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return classify(c.api.ContainerStart(ctx, id, container.StartOptions{}))
}

func (c *client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	seconds := int(timeout.Round(time.Second) / time.Second)
	if seconds < 0 {
		seconds = 0
	}
	// Docker waits up to the stop timeout before it kills; give the HTTP call that long on top.
	ctx, cancel := context.WithTimeout(ctx, c.timeout+time.Duration(seconds)*time.Second)
	defer cancel()
	return classify(c.api.ContainerStop(ctx, id, container.StopOptions{Timeout: &seconds}))
}

func (c *client) RemoveContainer(ctx context.Context, id string, opts container.RemoveOptions) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return classify(c.api.ContainerRemove(ctx, id, opts))
}

func (c *client) InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerInspect(ctx, id)
	if err != nil {
		return nil, classify(err)
	}
	return &resp, nil
}

func (c *client) StatContainerPath(ctx context.Context, id, path string) (container.PathStat, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	st, err := c.api.ContainerStatPath(ctx, id, path)
	if err == nil || ctx.Err() != nil {
		return st, classify(err)
	}
	// A HEAD answers no message ("request returned 500 Internal Server Error"): ask again with a
	// GET, which fails the same way before it archives anything and says why. Should it
	// succeed after all, its archive is not read.
	rc, st, gerr := c.api.CopyFromContainer(ctx, id, path)
	if gerr != nil {
		return container.PathStat{}, classify(gerr)
	}
	rc.Close()
	return st, nil
}

func (c *client) InspectContainerSize(ctx context.Context, id string) (int64, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, _, err := c.api.ContainerInspectWithRaw(ctx, id, true)
	if err != nil {
		return 0, classify(err)
	}
	if resp.SizeRw == nil {
		return 0, fmt.Errorf("docker reported no size for container %s", id)
	}
	return *resp.SizeRw, nil
}

func (c *client) ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	list, err := c.api.ContainerList(ctx, opts)
	return list, classify(err)
}

func (c *client) CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerExecCreate(ctx, id, opts)
	return resp.ID, classify(err)
}

// AttachExec is bounded by the caller's context only: the stream lives as long as the process.
func (c *client) AttachExec(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	resp, err := c.api.ContainerExecAttach(ctx, execID, opts)
	return resp, classify(err)
}

func (c *client) InspectExec(ctx context.Context, execID string) (container.ExecInspect, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ContainerExecInspect(ctx, execID)
	return resp, classify(err)
}

func (c *client) KillExec(ctx context.Context, execID string) error {
	inspect, err := c.InspectExec(ctx, execID)
	if err != nil || !inspect.Running || inspect.Pid <= 0 {
		return err
	}
	if err := syscall.Kill(inspect.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill exec process %d: %w", inspect.Pid, err)
	}
	return nil
}

func (c *client) InspectImage(ctx context.Context, ref string) (*image.InspectResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ImageInspect(ctx, ref)
	if err != nil {
		return nil, classify(err)
	}
	return &resp, nil
}

func (c *client) ListImages(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	list, err := c.api.ImageList(ctx, opts)
	return list, classify(err)
}

func (c *client) RemoveImage(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.api.ImageRemove(ctx, ref, opts)
	return resp, classify(err)
}

func (c *client) DiskUsage(ctx context.Context, opts types.DiskUsageOptions) (types.DiskUsage, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	du, err := c.api.DiskUsage(ctx, opts)
	return du, classify(err)
}

// LabelFilter builds list filters that match every given label (key=value, or key alone).
func LabelFilter(labels ...string) filters.Args {
	args := filters.NewArgs()
	for _, l := range labels {
		args.Add("label", l)
	}
	return args
}
