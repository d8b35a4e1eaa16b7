// Package nritest is an NRI plugin for tests: it connects to a socket through containerd/nri's
// stub, as real plugins do, records every event in order, and answers CreateContainer with a
// chosen adjustment or error.
package nritest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// Event is one event a plugin heard: its name ("RunPodSandbox", "CreateContainer", ...) and
// the pod's and container's IDs and names.
type Event struct {
	Name               string
	PodID, Pod         string
	ContainerID, Ctr   string
	Env                []string
	ContainerState     api.ContainerState
	SyncedPodsAndCtrs  int
	AdjustmentReturned bool
}

func (e Event) String() string {
	if e.ContainerID != "" {
		return fmt.Sprintf("%s %.12s(%s)", e.Name, e.ContainerID, e.Ctr)
	}
	return fmt.Sprintf("%s %.12s(%s)", e.Name, e.PodID, e.Pod)
}

// Plugin records events. Set Adjust, FailCreate or FailRun before connecting or between calls.
type Plugin struct {
	mu     sync.Mutex
	events []Event
	// Adjust, when set, is the adjustment of each CreateContainer.
	Adjust func(ctr *api.Container) *api.ContainerAdjustment
	// FailCreate and FailRun fail the next CreateContainer or RunPodSandbox with this error.
	FailCreate, FailRun error
	// Synced are the pods and containers Synchronize gave.
	Synced struct {
		Pods, Containers []string
	}
}

func (p *Plugin) record(name string, pod *api.PodSandbox, ctr *api.Container) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := Event{Name: name, PodID: pod.GetId(), Pod: pod.GetName()}
	if ctr != nil {
		e.ContainerID, e.Ctr, e.Env, e.ContainerState = ctr.GetId(), ctr.GetName(), ctr.GetEnv(), ctr.GetState()
	}
	p.events = append(p.events, e)
}

// Events is what the plugin heard so far.
func (p *Plugin) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events...)
}

// Names is the events' names and names of their pod or container, "RunPodSandbox pod".
func (p *Plugin) Names() []string {
	var out []string
	for _, e := range p.Events() {
		what := e.Pod
		if e.ContainerID != "" {
			what = e.Ctr
		}
		out = append(out, e.Name+" "+what)
	}
	return out
}

// Reset forgets the events so far.
func (p *Plugin) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = nil
}

func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Synced.Pods, p.Synced.Containers = nil, nil
	for _, pod := range pods {
		p.Synced.Pods = append(p.Synced.Pods, pod.GetId())
	}
	for _, c := range ctrs {
		p.Synced.Containers = append(p.Synced.Containers, c.GetId())
	}
	return nil, nil
}

func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RunPodSandbox", pod, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.FailRun
	p.FailRun = nil
	return err
}

func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("StopPodSandbox", pod, nil)
	return nil
}

func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RemovePodSandbox", pod, nil)
	return nil
}

func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("CreateContainer", pod, ctr)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.FailCreate; err != nil {
		p.FailCreate = nil
		return nil, nil, err
	}
	if p.Adjust != nil {
		return p.Adjust(ctr), nil, nil
	}
	return nil, nil, nil
}

func (p *Plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("PostCreateContainer", pod, ctr)
	return nil
}

func (p *Plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("StartContainer", pod, ctr)
	return nil
}

func (p *Plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("PostStartContainer", pod, ctr)
	return nil
}

func (p *Plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("StopContainer", pod, ctr)
	return nil, nil
}

func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("RemoveContainer", pod, ctr)
	return nil
}

// SocketPath is a socket path short enough for a unix socket, in a directory removed with
// the test.
func SocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "nri.sock")
}

// Connect connects p to the NRI socket as plugin idx-name and returns once it is
// synchronized; it disconnects with the test.
func Connect(t testing.TB, p *Plugin, socket, idx, name string) {
	t.Helper()
	s, err := stub.New(p, stub.WithSocketPath(socket), stub.WithPluginIdx(idx), stub.WithPluginName(name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("NRI plugin %s-%s: %v", idx, name, err)
	}
	t.Cleanup(s.Stop)
}
