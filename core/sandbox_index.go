package core

import (
	"context"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

// sandboxIndex maps sandbox IDs to their pod runtime. Docker labels are the truth; the index
// spares CreateContainer and StartContainer an Inspect of the sandbox for every container.
type sandboxIndex struct {
	mu   sync.RWMutex
	byID map[string]podRuntime
}

func newSandboxIndex() *sandboxIndex {
	return &sandboxIndex{byID: map[string]podRuntime{}}
}

func (x *sandboxIndex) put(id string, rt podRuntime) {
	x.mu.Lock()
	x.byID[id] = rt
	x.mu.Unlock()
}

func (x *sandboxIndex) remove(id string) {
	x.mu.Lock()
	delete(x.byID, id)
	x.mu.Unlock()
}

func (x *sandboxIndex) get(id string) (podRuntime, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rt, ok := x.byID[id]
	return rt, ok
}

// podRuntimeFromLabels reads a sandbox's runtime from its labels; sandboxes created by upstream
// cri-dockerd have none and run on Docker's default runtime.
func podRuntimeFromLabels(labels map[string]string) podRuntime {
	return podRuntime{Handler: labels[handlerLabel], DockerRuntime: labels[dockerRuntimeLabel]}
}

// rebuild fills the index from the labels of every sandbox container Docker has.
func (x *sandboxIndex) rebuild(ctx context.Context, docker libdocker.Client) error {
	list, err := docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel + "=" + containerTypeSandbox)})
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range list {
		x.byID[c.ID] = podRuntimeFromLabels(c.Labels)
	}
	return nil
}

// lookup returns the runtime of sandbox id (a full ID as we return it), asking Docker only on a
// miss: for a sandbox created by another cri-dockerd process since our start. The second result is
// false when no such sandbox exists.
func (x *sandboxIndex) lookup(ctx context.Context, docker libdocker.Client, id string) (string, podRuntime, bool, error) {
	if rt, ok := x.get(id); ok {
		return id, rt, true, nil
	}
	args := filters.NewArgs(filters.Arg("label", containerTypeLabel+"="+containerTypeSandbox), filters.Arg("id", id))
	list, err := docker.ListContainers(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return "", podRuntime{}, false, err
	}
	// The id filter matches prefixes: accept only an unambiguous one.
	if len(list) != 1 {
		return "", podRuntime{}, false, nil
	}
	rt := podRuntimeFromLabels(list[0].Labels)
	x.put(list[0].ID, rt)
	return list[0].ID, rt, true, nil
}

// countByHandler counts the sandboxes of each runtime handler.
func (x *sandboxIndex) countByHandler() map[string]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	counts := map[string]int{}
	for _, rt := range x.byID {
		counts[rt.Handler]++
	}
	return counts
}

// PodsByHandler counts the pod sandboxes Docker has, by RuntimeClass handler ("" for the
// default), for the metrics.
func (s *Service) PodsByHandler() map[string]int {
	return s.sandboxes.countByHandler()
}
