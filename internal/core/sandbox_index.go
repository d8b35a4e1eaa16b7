package core

import (
	"context"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// sandboxIndex maps sandbox IDs to their pod runtime. Docker labels are the truth; the index
// spares CreateContainer and StartContainer an Inspect of the sandbox for every container.
// It also remembers the CRI view of each sandbox seen in Docker, so that a sandbox whose
// container is removed behind our back is still reported as it was (sandbox_gone.go).
type sandboxIndex struct {
	mu      sync.RWMutex
	byID    map[string]podRuntime
	records map[string]sandboxRecord
	// endings are the sandboxes known to have stopped or been removed (from Docker's events,
	// our StopPodSandbox and the list at start), so that CreateContainer refuses them without
	// an inspect. Only what is known for sure is here: a sandbox that is missing runs, or its
	// events have not arrived yet.
	endings map[string]sandboxEnding
}

// sandboxEnding is how a sandbox stopped running.
type sandboxEnding int

const (
	sandboxRunning sandboxEnding = iota // or not known to have ended
	sandboxExited
	sandboxRemoved
)

// sandboxRecord is what the CRI reports of a sandbox that does not change while it lives.
type sandboxRecord struct {
	metadata    *runtimeapi.PodSandboxMetadata
	labels      map[string]string
	annotations map[string]string
	createdAt   int64
	handler     string
	// namespaces is nil when the record comes from a list (which does not say them all).
	namespaces *runtimeapi.NamespaceOption
	// pod is what CreateContainer takes from the sandbox (sandbox_settings.go); nil when the
	// record comes from a list.
	pod *podSettings
}

func newSandboxIndex() *sandboxIndex {
	return &sandboxIndex{byID: map[string]podRuntime{}, records: map[string]sandboxRecord{}, endings: map[string]sandboxEnding{}}
}

// observe records a Docker event of sandbox container id ("start", "die", "destroy"), for
// sandboxes the index knows.
func (x *sandboxIndex) observe(id, action string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byID[id]; !ok {
		return
	}
	switch action {
	case "start":
		delete(x.endings, id)
	case "die":
		if x.endings[id] != sandboxRemoved {
			x.endings[id] = sandboxExited
		}
	case "destroy":
		x.endings[id] = sandboxRemoved
	}
}

// ended says whether sandbox id is known to have exited or been removed.
func (x *sandboxIndex) ended(id string) sandboxEnding {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.endings[id]
}

// remember keeps the CRI view of sandbox id; one from an inspect (with namespaces) is not
// replaced by one from a list, and pod settings once known are kept.
func (x *sandboxIndex) remember(id string, rec sandboxRecord) {
	x.mu.Lock()
	old, ok := x.records[id]
	if ok && rec.pod == nil {
		rec.pod = old.pod
	}
	if !ok || old.namespaces == nil || rec.namespaces != nil {
		x.records[id] = rec
	}
	x.mu.Unlock()
}

// rememberSettings keeps the pod settings of sandbox id, if the index has a record of it.
func (x *sandboxIndex) rememberSettings(id string, p podSettings) {
	x.mu.Lock()
	if rec, ok := x.records[id]; ok {
		rec.pod = &p
		x.records[id] = rec
	}
	x.mu.Unlock()
}

// record returns what was remembered of sandbox id.
func (x *sandboxIndex) record(id string) (sandboxRecord, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rec, ok := x.records[id]
	return rec, ok
}

// ids lists the sandboxes the index knows.
func (x *sandboxIndex) ids() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.byID)+len(x.records))
	for id := range x.byID {
		out = append(out, id)
	}
	for id := range x.records {
		if _, ok := x.byID[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

func (x *sandboxIndex) put(id string, rt podRuntime) {
	x.mu.Lock()
	x.byID[id] = rt
	x.mu.Unlock()
}

func (x *sandboxIndex) remove(id string) {
	x.mu.Lock()
	delete(x.byID, id)
	delete(x.records, id)
	delete(x.endings, id)
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
		if c.State == container.StateExited || c.State == container.StateDead {
			x.endings[c.ID] = sandboxExited
		}
		if rec, ok := recordFromSummary(c); ok {
			x.records[c.ID] = rec
		}
	}
	return nil
}

// recordFromSummary is the CRI view of a listed sandbox container; false when its name is not
// one of ours.
func recordFromSummary(c container.Summary) (sandboxRecord, bool) {
	if len(c.Names) == 0 {
		return sandboxRecord{}, false
	}
	name, err := parseName(c.Names[0])
	if err != nil {
		return sandboxRecord{}, false
	}
	labels, annotations := splitLabels(c.Labels)
	return sandboxRecord{
		metadata:    name.sandboxMetadata(),
		labels:      labels,
		annotations: annotations,
		createdAt:   c.Created * int64(time.Second),
		handler:     c.Labels[handlerLabel],
	}, true
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
	if rec, ok := recordFromSummary(list[0]); ok {
		x.remember(list[0].ID, rec)
	}
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

// prune forgets sandboxes that Docker no longer has and that left nothing behind.
func (x *sandboxIndex) prune(ids []string) {
	if len(ids) == 0 {
		return
	}
	x.mu.Lock()
	for _, id := range ids {
		delete(x.byID, id)
		delete(x.records, id)
		delete(x.endings, id)
	}
	x.mu.Unlock()
}

// recordOfConfig is the CRI view of a sandbox RunPodSandbox has just created from cfg, until
// PodSandboxStatus reports it from Docker: remembered at once, so that a sandbox removed behind
// our back before anyone asked about it is still reported as it was.
func recordOfConfig(cfg *runtimeapi.PodSandboxConfig, rt podRuntime) sandboxRecord {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	labels, annotations := splitLabels(makeLabels(cfg.GetLabels(), cfg.GetAnnotations()))
	m := cfg.GetMetadata()
	return sandboxRecord{
		metadata:    &runtimeapi.PodSandboxMetadata{Name: m.GetName(), Namespace: m.GetNamespace(), Uid: m.GetUid(), Attempt: m.GetAttempt()},
		labels:      labels,
		annotations: annotations,
		createdAt:   time.Now().UnixNano(),
		handler:     rt.Handler,
		namespaces: &runtimeapi.NamespaceOption{
			Network: namespaceMode(ns.GetNetwork() == runtimeapi.NamespaceMode_NODE),
			Pid:     namespaceMode(ns.GetPid() == runtimeapi.NamespaceMode_NODE),
			Ipc:     namespaceMode(ns.GetIpc() == runtimeapi.NamespaceMode_NODE),
		},
	}
}
