package core

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// A sandbox whose container was removed behind our back (`docker rm -f` of the pause
// container) still leaves what the kubelet must clean up: the pod's containers and, for a pod
// of the network plugin, its checkpoint with the network to tear down. As containerd and
// CRI-O do, such a sandbox is reported NOTREADY for as long as any of that exists, so that the
// kubelet (or `crictl rmp`, which asks PodSandboxStatus first) reaches StopPodSandbox and
// RemovePodSandbox, which stop and remove what is left. It is reported with what is still
// known: the sandbox as we last saw it in Docker, or after a restart of cri-dockerd what its
// containers and its checkpoint say (pod name, namespace and uid, the kubelet's pod labels,
// the earliest creation time; no annotations, attempt or handler). A start of cri-dockerd
// keeps the network of such a sandbox while it has containers (cleanUpOrphanNetworks).

// goneSandbox is a sandbox Docker no longer has, with what it left behind.
type goneSandbox struct {
	id string
	// containers are the pod's containers, any state.
	containers []container.Summary
	// checkpointed: its network checkpoint is still there.
	checkpointed bool
	record       sandboxRecord
}

// podLabelKeys are the kubelet's labels of a pod, set on its sandbox and on each container.
var podLabelKeys = []string{"io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"}

// listAllOurs lists, in one Docker call, every sandbox and container of ours, any state.
func (s *Service) listAllOurs(ctx context.Context) ([]container.Summary, error) {
	return s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel)})
}

// checkpointIDs lists the sandboxes with a network checkpoint.
func (s *Service) checkpointIDs() []string {
	if s.checkpoints == nil {
		return nil
	}
	ids, err := s.checkpoints.ids()
	if err != nil {
		s.log.Warnf("list sandbox checkpoints: %v", err)
	}
	return ids
}

// collectGone groups the containers (of all, a list of our objects) and checkpoints whose
// sandbox is not among present by sandbox, for the sandboxes whose ID starts with idPrefix.
func (s *Service) collectGone(all []container.Summary, present map[string]bool, idPrefix string) map[string]*goneSandbox {
	gone := map[string]*goneSandbox{}
	get := func(id string) *goneSandbox {
		g := gone[id]
		if g == nil {
			g = &goneSandbox{id: id}
			gone[id] = g
		}
		return g
	}
	for _, c := range all {
		if c.Labels[containerTypeLabel] != containerTypeContainer {
			continue
		}
		if id := c.Labels[sandboxIDLabel]; id != "" && !present[id] && strings.HasPrefix(id, idPrefix) {
			get(id).containers = append(get(id).containers, c)
		}
	}
	for _, id := range s.checkpointIDs() {
		if !present[id] && strings.HasPrefix(id, idPrefix) {
			get(id).checkpointed = true
		}
	}
	for _, g := range gone {
		g.record = s.goneRecord(g)
	}
	return gone
}

// hasPodContainers reports whether Docker has containers of pod sandbox id; false when it
// cannot tell.
func (s *Service) hasPodContainers(ctx context.Context, id string) bool {
	list, err := s.podContainers(ctx, id)
	return err == nil && len(list) > 0
}

// findGoneSandbox finds the sandbox Docker no longer has that id names in full or by a unique
// prefix; nil when none does (or it left nothing behind).
func (s *Service) findGoneSandbox(ctx context.Context, id string) (*goneSandbox, error) {
	list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel + "=" + containerTypeContainer)})
	if err != nil {
		return nil, dockerError(err, "list containers of pod sandbox %q", id)
	}
	var match *goneSandbox
	for _, g := range s.collectGone(list, nil, id) {
		if match != nil {
			return nil, invalidf("pod sandbox id prefix %q matches more than one pod sandbox", id)
		}
		match = g
	}
	// Gone indeed: not a sandbox Docker has under a prefix it could not resolve.
	if match != nil {
		if _, err := s.docker.InspectContainer(ctx, match.id); err == nil {
			return nil, nil
		} else if !libdocker.IsNotFound(err) {
			return nil, dockerError(err, "inspect pod sandbox %q", match.id)
		}
	}
	return match, nil
}

// goneRecord is what is still known of a gone sandbox: what we saw of it in Docker, or else
// what its checkpoint and its containers say.
func (s *Service) goneRecord(g *goneSandbox) sandboxRecord {
	if rec, ok := s.sandboxes.record(g.id); ok {
		return rec
	}
	rec := sandboxRecord{labels: map[string]string{}, annotations: map[string]string{}}
	if rt, ok := s.sandboxes.get(g.id); ok {
		rec.handler = rt.Handler
	}
	if g.checkpointed {
		if cp, err := s.checkpoints.get(g.id); err == nil && cp != nil {
			rec.metadata = &runtimeapi.PodSandboxMetadata{Name: cp.Network.Name, Namespace: cp.Network.Namespace, Uid: cp.Network.UID}
		}
		if fi, err := os.Stat(s.checkpoints.path(g.id)); err == nil {
			rec.createdAt = fi.ModTime().UnixNano()
		}
	}
	// The oldest container first: the sandbox was made before any of them.
	containers := append([]container.Summary(nil), g.containers...)
	sort.Slice(containers, func(i, j int) bool { return containers[i].Created < containers[j].Created })
	for i, c := range containers {
		if created := c.Created * int64(time.Second); i == 0 && created > 0 && (rec.createdAt == 0 || created < rec.createdAt) {
			rec.createdAt = created
		}
		if rec.metadata == nil && len(c.Names) > 0 {
			if name, err := parseName(c.Names[0]); err == nil {
				rec.metadata = &runtimeapi.PodSandboxMetadata{Name: name.pod, Namespace: name.namespace, Uid: name.uid}
			}
		}
		labels, _ := splitLabels(c.Labels)
		for _, k := range podLabelKeys {
			if v, ok := labels[k]; ok {
				if _, set := rec.labels[k]; !set {
					rec.labels[k] = v
				}
			}
		}
	}
	if rec.metadata == nil {
		rec.metadata = &runtimeapi.PodSandboxMetadata{}
	}
	return rec
}

// podSandbox is the gone sandbox as ListPodSandbox reports it.
func (g *goneSandbox) podSandbox() *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             g.id,
		Metadata:       g.record.metadata,
		State:          runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		CreatedAt:      g.record.createdAt,
		Labels:         g.record.labels,
		Annotations:    g.record.annotations,
		RuntimeHandler: g.record.handler,
	}
}

// goneSandboxStatus is the gone sandbox as PodSandboxStatus reports it: NOTREADY, with the
// IPs of its checkpoint if it has one.
func (s *Service) goneSandboxStatus(g *goneSandbox, verbose bool) *runtimeapi.PodSandboxStatusResponse {
	ns := g.record.namespaces
	if ns == nil {
		ns = &runtimeapi.NamespaceOption{}
	}
	st := &runtimeapi.PodSandboxStatus{
		Id:             g.id,
		Metadata:       g.record.metadata,
		State:          runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		CreatedAt:      g.record.createdAt,
		Labels:         g.record.labels,
		Annotations:    g.record.annotations,
		RuntimeHandler: g.record.handler,
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: ns}},
	}
	if g.checkpointed {
		st.Network.Ip, st.Network.AdditionalIps = s.sandboxIPs(g.id, nil)
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st}
	if verbose {
		ids := make([]string, 0, len(g.containers))
		for _, c := range g.containers {
			ids = append(ids, c.ID)
		}
		raw, _ := json.Marshal(map[string]any{
			"sandboxContainer": "removed from Docker",
			"containers":       ids,
			"checkpoint":       g.checkpointed,
		})
		resp.Info = map[string]string{"info": string(raw)}
	}
	return resp
}
