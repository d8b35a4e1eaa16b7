// Package nri hosts NRI, the Node Resource Interface, on a Docker node: plugins connect to a
// socket (or are started from a directory), hear of every pod and container event in order,
// and adjust containers as they are created. The protocol, the plugins' registration and their
// order are containerd/nri's adaptation package, as in containerd and CRI-O; this package adds
// what cri-dockerd needs around it: its configuration, one lock that keeps the events of all
// pods in the order they happen, the state of each container so that plugins hear of its stop
// once (whether the kubelet stopped it or it exited), and the socket's owner checked first.
// A nil *Host is NRI off: every method does nothing.
package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"
)

// Config is NRI's configuration, named as containerd's.
type Config struct {
	// Enable hosts NRI (containerd: on by default).
	Enable bool
	// SocketPath is where external plugins connect.
	SocketPath string
	// PluginPath is where plugins to start are found; PluginConfigPath their configuration.
	PluginPath, PluginConfigPath string
	// RegistrationTimeout bounds a plugin's registration, RequestTimeout each of its answers.
	RegistrationTimeout, RequestTimeout time.Duration
	// DisableConnections refuses external plugins: only those of PluginPath run.
	DisableConnections bool
}

// The defaults, as containerd's.
const (
	DefaultSocketPath          = adaptation.DefaultSocketPath
	DefaultPluginPath          = adaptation.DefaultPluginPath
	DefaultPluginConfigPath    = adaptation.DefaultPluginConfigPath
	DefaultRegistrationTimeout = adaptation.DefaultPluginRegistrationTimeout
	DefaultRequestTimeout      = adaptation.DefaultPluginRequestTimeout
)

// Runtime is what plugins see of cri-dockerd beyond the events: every pod and container it
// knows (given to a plugin as it connects), and the updates plugins ask for on their own.
type Runtime interface {
	PodsAndContainers(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error)
	// UpdateContainers applies updates and returns those that failed.
	UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
}

// state is what plugins were last told of a container.
type state int

const (
	created state = iota + 1
	running
	stopped
)

// Host is NRI hosted for cri-dockerd.
type Host struct {
	nri *adaptation.Adaptation
	rt  Runtime
	log *logrus.Entry
	cfg Config

	// mu keeps the events in order: one at a time, for all pods.
	mu     sync.Mutex
	states map[string]state
	// plugins is how many plugins are connected (adaptation's count); launched, whether Start
	// found plugins to launch in PluginPath.
	plugins  atomic.Int64
	launched bool
}

// Plugins is how many plugins are connected, at least 1 when Start launched any from
// PluginPath (adaptation counts only those that connect): with none, events need not be sent.
func (h *Host) Plugins() int {
	if h == nil {
		return 0
	}
	n := int(h.plugins.Load())
	if h.launched {
		n = max(n, 1)
	}
	return n
}

// counter takes adaptation's plugin count and logs each call of a plugin (debug); the other
// figures are not kept yet.
type counter struct{ h *Host }

func (c counter) RecordPluginInvocation(plugin, op string, err error) {
	c.h.log.Debugf("NRI: %s of plugin %s: %v", op, plugin, err)
}
func (c counter) RecordPluginLatency(string, string, time.Duration) {}
func (c counter) RecordPluginAdjustments(plugin, op string, adj *adaptation.ContainerAdjustment, updates, evicts int) {
	c.h.log.Debugf("NRI: %s of plugin %s: adjustment %v, %d updates, %d evictions", op, plugin, adj, updates, evicts)
}
func (c counter) UpdatePluginCount(n int) { c.h.plugins.Store(int64(n)) }

// New returns the host of cfg, not started; nil when NRI is off.
func New(cfg Config, name, version string, rt Runtime, log *logrus.Entry) (*Host, error) {
	if !cfg.Enable {
		return nil, nil
	}
	h := &Host{rt: rt, log: log, cfg: cfg, states: map[string]state{}}
	nrilog.Set(logger{log})
	if cfg.RegistrationTimeout > 0 {
		adaptation.SetPluginRegistrationTimeout(cfg.RegistrationTimeout)
	}
	if cfg.RequestTimeout > 0 {
		adaptation.SetPluginRequestTimeout(cfg.RequestTimeout)
	}
	opts := []adaptation.Option{
		adaptation.WithSocketPath(cfg.SocketPath),
		adaptation.WithPluginPath(cfg.PluginPath),
		adaptation.WithPluginConfigPath(cfg.PluginConfigPath),
		adaptation.WithMetrics(counter{h}),
	}
	if cfg.DisableConnections {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	a, err := adaptation.New(name, version, h.synchronize, h.update, opts...)
	if err != nil {
		return nil, fmt.Errorf("NRI: %w", err)
	}
	h.nri = a
	return h, nil
}

// ErrSocketTaken is Start's error when another runtime serves the NRI socket.
var ErrSocketTaken = errors.New("the NRI socket is served by another runtime")

// Start starts the plugins of PluginPath and listens on the socket. A socket another process
// serves (a containerd with NRI on, on the same node) is left alone: Start fails with
// ErrSocketTaken, and the caller goes on without NRI (adaptation would remove the socket and
// take it over).
func (h *Host) Start() error {
	if h == nil {
		return nil
	}
	if !h.cfg.DisableConnections {
		if conn, err := net.DialTimeout("unix", h.cfg.SocketPath, time.Second); err == nil {
			conn.Close()
			return fmt.Errorf("%s: %w (containerd's NRI, if containerd runs with NRI on: set disable = true in its [plugins.\"io.containerd.nri.v1.nri\"], or give us another --nri-socket)", h.cfg.SocketPath, ErrSocketTaken)
		}
	}
	if err := h.nri.Start(); err != nil {
		return fmt.Errorf("NRI: %w", err)
	}
	if entries, err := os.ReadDir(h.cfg.PluginPath); err == nil && len(entries) > 0 {
		h.launched = true
	}
	return nil
}

// Stop disconnects the plugins and closes the socket.
func (h *Host) Stop() {
	if h == nil {
		return
	}
	h.nri.Stop()
}

// BlockSync holds back a plugin's synchronization until the returned func is called: around a
// change that the synchronization must see whole (a container created and told of).
func (h *Host) BlockSync() func() {
	if h == nil {
		return func() {}
	}
	b := h.nri.BlockPluginSync()
	return b.Unblock
}

// synchronize gives a plugin that connects every pod and container we know.
func (h *Host) synchronize(ctx context.Context, sync adaptation.SyncCB) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	pods, containers, err := h.rt.PodsAndContainers(ctx)
	if err != nil {
		return err
	}
	for _, c := range containers {
		switch c.GetState() {
		case api.ContainerState_CONTAINER_CREATED:
			h.states[c.GetId()] = created
		case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
			h.states[c.GetId()] = running
		default:
			h.states[c.GetId()] = stopped
		}
	}
	updates, err := sync(ctx, pods, containers)
	if err != nil {
		return err
	}
	h.apply(ctx, updates)
	return nil
}

// update applies the updates a plugin asks for on its own.
func (h *Host) update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rt.UpdateContainers(ctx, updates)
}

// apply applies the updates of other containers that came with an event's answer; a failure
// is logged, as containerd does.
func (h *Host) apply(ctx context.Context, updates []*api.ContainerUpdate) {
	if len(updates) == 0 {
		return
	}
	if failed, err := h.rt.UpdateContainers(ctx, updates); err != nil || len(failed) > 0 {
		h.log.Warnf("NRI: %d of %d container updates plugins asked for failed: %v", len(failed), len(updates), err)
	}
}

// RunPodSandbox tells plugins of a pod that runs; an error fails the pod.
func (h *Host) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
}

// StopPodSandbox tells plugins of a pod stopped.
func (h *Host) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
}

// RemovePodSandbox tells plugins of a pod removed.
func (h *Host) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
}

// CreateContainer asks plugins for their adjustment of a container about to be created, and
// applies the updates of other containers they ask for with it. An error fails the create.
func (h *Host) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	if h == nil {
		return nil, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Plugins heard of it, failed or not: a failed create is undone with its stop and
	// removal (RemoveContainer), as containerd does.
	h.states[ctr.GetId()] = created
	resp, err := h.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	if len(resp.GetEvict()) > 0 {
		h.log.Warnf("NRI: plugins asked to evict %d containers as %s was created: eviction is not supported, nothing was evicted", len(resp.GetEvict()), ctr.GetName())
	}
	h.apply(ctx, resp.GetUpdate())
	return resp.GetAdjust(), nil
}

// PostCreateContainer tells plugins of a container created.
func (h *Host) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr})
}

// StartContainer tells plugins of a container about to start; an error fails the start.
func (h *Host) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr})
}

// PostStartContainer tells plugins of a container started.
func (h *Host) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.states[ctr.GetId()] == created {
		h.states[ctr.GetId()] = running
	}
	return h.nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr})
}

// UpdateContainer asks plugins for their view of a container's new resources: what they
// return is what is applied.
func (h *Host) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, error) {
	if h == nil {
		return res, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	resp, err := h.nri.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
	if err != nil {
		return nil, err
	}
	var own *api.LinuxResources
	var others []*api.ContainerUpdate
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() == ctr.GetId() {
			own = u.GetLinux().GetResources()
			continue
		}
		others = append(others, u)
	}
	h.apply(ctx, others)
	if own == nil {
		return res, nil
	}
	return own, nil
}

// PostUpdateContainer tells plugins of a container whose resources changed.
func (h *Host) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nri.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
}

// StopContainer tells plugins of a container that stopped, by the kubelet's StopContainer or
// on its own: once, whichever comes first.
func (h *Host) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.states[ctr.GetId()]; !ok || s == stopped {
		return nil // never told of, or told of its stop already
	}
	h.states[ctr.GetId()] = stopped
	resp, err := h.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return err
	}
	h.apply(ctx, resp.GetUpdate())
	return nil
}

// RemoveContainer tells plugins of a container removed, and of its stop first if they have
// not heard of it (a container created and never started), as containerd does.
func (h *Host) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.states[ctr.GetId()]
	if !ok {
		return nil
	}
	if s != stopped {
		h.states[ctr.GetId()] = stopped
		if resp, err := h.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr}); err != nil {
			h.log.Warnf("NRI: StopContainer of %s before its removal: %v", ctr.GetId(), err)
		} else {
			h.apply(ctx, resp.GetUpdate())
		}
	}
	delete(h.states, ctr.GetId())
	return h.nri.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
}

// logger is NRI's log on ours.
type logger struct{ e *logrus.Entry }

func (l logger) Debugf(_ context.Context, f string, a ...any) { l.e.Debugf("NRI: "+f, a...) }
func (l logger) Infof(_ context.Context, f string, a ...any)  { l.e.Infof("NRI: "+f, a...) }
func (l logger) Warnf(_ context.Context, f string, a ...any)  { l.e.Warnf("NRI: "+f, a...) }
func (l logger) Errorf(_ context.Context, f string, a ...any) { l.e.Errorf("NRI: "+f, a...) }
