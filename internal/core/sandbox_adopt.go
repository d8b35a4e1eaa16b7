package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// Adopting the sandboxes of upstream cri-dockerd (Mirantis) after a node swapped the binary
// while pods kept running.
//
// Upstream creates a CNI pod's sandbox with Docker NetworkMode none and labels without our
// prefix, runs its CNI ADD through libcni (cache in --cni-cache-dir, /var/lib/cni/cache by
// default, as ours), and keeps no IPs anywhere: each PodSandboxStatus reads them from eth0 in
// the pod's namespace. Its checkpoint, <root>/sandbox/<id> (same --cri-dockerd-root-directory),
// holds the pod's name, namespace and port mappings:
//
//	{"version":"v1","name":"web","namespace":"default",
//	 "data":{"port_mappings":[{"protocol":"tcp","container_port":80,"host_port":8080}]},
//	 "checksum":1234567}
//
// Without a checkpoint of ours such a sandbox would have no IP in PodSandboxStatus, and the
// kubelet kills a pod-network sandbox without one. So a running upstream sandbox gets a
// checkpoint of ours, as if we had set it up: its IPs read once from its namespace, the network
// its ADD used (libcni's cache), the port mappings from upstream's checkpoint. From then on
// status, stop, remove and the orphan clean up treat it as one of ours. This happens at start
// and, for a sandbox that appears later or could not be read then, at its first
// PodSandboxStatus, StopPodSandbox or RemovePodSandbox. A sandbox with a checkpoint of ours is
// never touched.

// upstreamCheckpointDir is upstream's checkpoint directory under the root directory.
const upstreamCheckpointDir = "sandbox"

// upstreamCheckpointVersion is the only version of upstream's (and dockershim's) format.
const upstreamCheckpointVersion = "v1"

// upstreamCheckpoint is upstream's sandbox checkpoint. The checksum (an FNV hash of a Go dump
// of upstream's own types) is not verified: nothing of ours can recompute it.
type upstreamCheckpoint struct {
	Version   string                  `json:"version"`
	Name      string                  `json:"name"`
	Namespace string                  `json:"namespace"`
	Data      *upstreamCheckpointData `json:"data,omitempty"`
	Checksum  uint64                  `json:"checksum"`
}

type upstreamCheckpointData struct {
	PortMappings []upstreamPortMapping `json:"port_mappings,omitempty"`
	HostNetwork  bool                  `json:"host_network,omitempty"`
}

type upstreamPortMapping struct {
	Protocol      *string `json:"protocol,omitempty"`
	ContainerPort *int32  `json:"container_port,omitempty"`
	HostPort      *int32  `json:"host_port,omitempty"`
	HostIP        string  `json:"host_ip,omitempty"`
}

// parseUpstreamCheckpoint reads upstream's checkpoint format.
func parseUpstreamCheckpoint(data []byte) (*upstreamCheckpoint, error) {
	var cp upstreamCheckpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, err
	}
	if cp.Version != upstreamCheckpointVersion {
		return nil, fmt.Errorf("version %q, this cri-dockerd reads %q", cp.Version, upstreamCheckpointVersion)
	}
	if cp.Data == nil {
		cp.Data = &upstreamCheckpointData{}
	}
	return &cp, nil
}

// portMappings are the checkpoint's mappings that publish a host port.
func (cp *upstreamCheckpoint) portMappings() []network.PortMapping {
	var out []network.PortMapping
	for _, pm := range cp.Data.PortMappings {
		if pm.HostPort == nil || *pm.HostPort <= 0 || pm.ContainerPort == nil {
			continue
		}
		proto := "tcp"
		if pm.Protocol != nil && *pm.Protocol != "" {
			proto = strings.ToLower(*pm.Protocol)
		}
		out = append(out, network.PortMapping{HostPort: *pm.HostPort, ContainerPort: *pm.ContainerPort, Protocol: proto, HostIP: pm.HostIP})
	}
	return out
}

// adoption is the state of adopting upstream's sandboxes; the zero value is ready.
type adoption struct {
	mu sync.Mutex
	// failed holds when an adoption last failed, so that a sandbox that cannot be adopted is
	// not retried (and logged) at every PodSandboxStatus.
	failed map[string]time.Time
	// readIPs reads the pod's IPs from a network namespace; nil: network.NamespaceIPs on eth0.
	readIPs func(nsPath string) ([]string, error)
}

// adoptRetry is how long a failed adoption is not tried again from PodSandboxStatus.
const adoptRetry = 30 * time.Second

func (a *adoption) recentlyFailed(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.failed[id]
	return ok && time.Since(t) < adoptRetry
}

func (a *adoption) setFailed(id string, failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !failed {
		delete(a.failed, id)
		return
	}
	if a.failed == nil {
		a.failed = map[string]time.Time{}
	}
	a.failed[id] = time.Now()
}

func (a *adoption) ips(nsPath string) ([]string, error) {
	if a.readIPs != nil {
		return a.readIPs(nsPath)
	}
	return network.NamespaceIPs(nsPath, "eth0")
}

// upstreamCheckpointPath is upstream's checkpoint of sandbox id; "" without a root directory.
func (s *Service) upstreamCheckpointPath(id string) string {
	if s.opts.RootDirectory == "" || !validCheckpointID(id) {
		return ""
	}
	return filepath.Join(s.opts.RootDirectory, upstreamCheckpointDir, id)
}

// readUpstreamCheckpoint reads upstream's checkpoint of sandbox id; nil without error when
// there is none.
func (s *Service) readUpstreamCheckpoint(id string) (*upstreamCheckpoint, error) {
	path := s.upstreamCheckpointPath(id)
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cp, err := parseUpstreamCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("upstream cri-dockerd's checkpoint %s: %w", path, err)
	}
	return cp, nil
}

// removeUpstreamCheckpoint deletes upstream's checkpoint of sandbox id, as upstream did when it
// removed the sandbox; a missing one is fine.
func (s *Service) removeUpstreamCheckpoint(id string) {
	path := s.upstreamCheckpointPath(id)
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.WithField("id", id).Warnf("remove upstream cri-dockerd's checkpoint: %v", err)
	}
}

// createdByUpstream reports whether a sandbox's labels are upstream's: every sandbox of ours
// carries the runtime handler and CRI key labels (an image's labels, merged in by Docker, may
// use our prefix too, so the prefix alone does not tell).
func createdByUpstream(labels map[string]string) bool {
	_, handler := labels[handlerLabel]
	_, keys := labels[criKeysLabel]
	return !handler && !keys
}

// adopter is the network plugin's Adopter, nil when pods of its kind cannot be adopted (Docker's
// bridge) or there is nowhere to keep checkpoints.
func (s *Service) adopter() network.Adopter {
	if s.checkpoints == nil || !s.net.Namespaced() {
		return nil
	}
	a, _ := s.net.(network.Adopter)
	return a
}

// shouldAdopt is the decision, from Docker's view of a sandbox: upstream's labels, a network
// namespace of its own that a plugin attached (NetworkMode none), and, unless running is not
// required, a running process whose namespace holds the pod's IPs. The caller still checks that
// no checkpoint of ours exists.
func shouldAdopt(c *container.InspectResponse, requireRunning bool) bool {
	if c == nil || c.Config == nil || c.HostConfig == nil {
		return false
	}
	if c.Config.Labels[containerTypeLabel] != containerTypeSandbox || !createdByUpstream(c.Config.Labels) {
		return false
	}
	if !c.HostConfig.NetworkMode.IsNone() {
		return false
	}
	return !requireRunning || netNSPath(c) != ""
}

// adoptIfUpstream adopts sandbox c when it is a running upstream sandbox without a checkpoint
// of ours (the lazy path of PodSandboxStatus). Failures are logged, and not retried for a while.
func (s *Service) adoptIfUpstream(ctx context.Context, c *container.InspectResponse) {
	if !shouldAdopt(c, true) || s.adopter() == nil || s.adoptions.recentlyFailed(c.ID) {
		return
	}
	s.adoptSandbox(ctx, c)
}

// adoptForTearDown adopts an upstream sandbox, running or not, before StopPodSandbox or
// RemovePodSandbox tears its network down: a stopped one gets its IPs from libcni's cache.
func (s *Service) adoptForTearDown(ctx context.Context, c *container.InspectResponse) {
	if !shouldAdopt(c, false) || s.adopter() == nil {
		return
	}
	s.adoptSandbox(ctx, c)
}

// adoptSandbox writes the checkpoint of upstream sandbox c; false when there is nothing to adopt
// or it failed (logged).
func (s *Service) adoptSandbox(ctx context.Context, c *container.InspectResponse) bool {
	id := c.ID
	log := s.log.WithField("id", id)
	unlock := s.netLocks.Lock(id)
	defer unlock()
	if cp, err := s.checkpoints.get(id); cp != nil || err != nil {
		return false // ours: never touched
	}
	name, err := parseName(c.Name)
	if err != nil {
		log.Debugf("not adopting an upstream sandbox: %v", err)
		return false
	}
	pod := network.Pod{SandboxID: id, Namespace: name.namespace, Name: name.pod, UID: name.uid}
	var warnings []string
	ucp, err := s.readUpstreamCheckpoint(id)
	switch {
	case err != nil:
		warnings = append(warnings, err.Error()+": its port mappings are taken from the CNI cache")
	case ucp == nil:
		warnings = append(warnings, fmt.Sprintf("upstream cri-dockerd's checkpoint %s is missing: the port mappings are taken from the CNI cache", s.upstreamCheckpointPath(id)))
	default:
		pod.PortMappings = ucp.portMappings()
	}
	nsPath, pid := netNSPath(c), 0
	var ips []string
	if nsPath != "" {
		pid = c.State.Pid
		if ips, err = s.adoptions.ips(nsPath); err != nil {
			warnings = append(warnings, fmt.Sprintf("read the pod's IPs from its network namespace: %v", err))
		}
	}
	att, more := s.adopter().Adopt(pod, ips)
	warnings = append(warnings, more...)
	if att == nil {
		s.adoptionFailed(id, "not adopting the sandbox of upstream cri-dockerd: "+strings.Join(warnings, "; "))
		return false
	}
	cp := &sandboxCheckpoint{SandboxID: id, State: checkpointReady, Network: att}
	more, err = s.keepAttachment(cp, pid)
	if err != nil {
		s.adoptionFailed(id, fmt.Sprintf("adopt the sandbox of upstream cri-dockerd: %v", err))
		return false
	}
	warnings = append(warnings, more...)
	s.adoptions.setFailed(id, false)
	log.WithFields(map[string]any{
		"pod": name.namespace + "/" + name.pod, "ips": att.IPs, "network": att.Network, "port_mappings": len(att.PortMappings), "running": nsPath != "",
	}).Info("adopted a pod sandbox of upstream cri-dockerd: its network is now torn down by this cri-dockerd")
	for _, w := range warnings {
		log.Warnf("adopted sandbox of upstream cri-dockerd: %s", w)
	}
	return true
}

// adoptionFailed logs a failed adoption once per retry period.
func (s *Service) adoptionFailed(id, msg string) {
	if !s.adoptions.recentlyFailed(id) {
		s.log.WithField("id", id).Warn(msg)
	}
	s.adoptions.setFailed(id, true)
}

// adoptGoneUpstream adopts, from upstream's checkpoint and libcni's cache, the network of an
// upstream sandbox that Docker no longer has, so that its DEL can run (the IP lease and host
// ports are still held). id is a full ID.
func (s *Service) adoptGoneUpstream(id string) bool {
	a := s.adopter()
	if a == nil {
		return false
	}
	unlock := s.netLocks.Lock(id)
	defer unlock()
	if cp, err := s.checkpoints.get(id); cp != nil || err != nil {
		return false
	}
	ucp, err := s.readUpstreamCheckpoint(id)
	if err != nil || ucp == nil || ucp.Data.HostNetwork {
		return false
	}
	att, warnings := a.Adopt(network.Pod{SandboxID: id, Namespace: ucp.Namespace, Name: ucp.Name, PortMappings: ucp.portMappings()}, nil)
	if att == nil {
		return false
	}
	if err := s.checkpoints.put(&sandboxCheckpoint{SandboxID: id, State: checkpointReady, Network: att}); err != nil {
		s.log.WithField("id", id).Warnf("adopt the network of a removed sandbox of upstream cri-dockerd: %v", err)
		return false
	}
	s.log.WithFields(map[string]any{"id": id, "pod": ucp.Namespace + "/" + ucp.Name, "network": att.Network}).Info("adopted the network of a removed pod sandbox of upstream cri-dockerd, to tear it down")
	for _, w := range warnings {
		s.log.WithField("id", id).Warnf("adopted sandbox of upstream cri-dockerd: %s", w)
	}
	return true
}

// releaseUpstreamLeftovers, after the DEL of an upstream sandbox's network, runs the DEL of
// upstream's loopback attachment (which drops its cache entry). Best effort: logged.
func (s *Service) releaseUpstreamLeftovers(ctx context.Context, id string, labels map[string]string, netns string) {
	a := s.adopter()
	if a == nil {
		return
	}
	if labels != nil && !createdByUpstream(labels) {
		return
	}
	if labels == nil {
		if path := s.upstreamCheckpointPath(id); path == "" {
			return
		} else if _, err := os.Stat(path); err != nil {
			return
		}
	}
	if err := a.ReleaseLeftovers(ctx, id, netns); err != nil {
		s.log.WithField("id", id).Warn(err)
	}
}

// adoptUpstreamSandboxes adopts, at start, every running upstream sandbox without a checkpoint
// of ours, and the networks of upstream sandboxes Docker no longer has (torn down by
// cleanUpOrphanNetworks, which runs next). The sandbox index must be rebuilt first.
func (s *Service) adoptUpstreamSandboxes(ctx context.Context) {
	if s.adopter() == nil {
		return
	}
	list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel + "=" + containerTypeSandbox)})
	if err != nil {
		s.log.Warnf("adopt sandboxes of upstream cri-dockerd: list sandboxes: %v", err)
		return
	}
	adopted := 0
	for _, c := range list {
		if c.State != "running" || c.HostConfig.NetworkMode != "none" || !createdByUpstream(c.Labels) {
			continue
		}
		if cp, err := s.checkpoints.get(c.ID); cp != nil || err != nil {
			continue
		}
		full, err := s.docker.InspectContainer(ctx, c.ID)
		if err != nil {
			continue
		}
		if shouldAdopt(full, true) && s.adoptSandbox(ctx, full) {
			adopted++
		}
	}
	// Upstream's checkpoints of sandboxes that are gone: their networks may still be up.
	for _, id := range s.goneUpstreamSandboxes(ctx) {
		s.adoptGoneUpstream(id)
	}
	if adopted > 0 {
		s.log.Infof("adopted %d running pod sandboxes of upstream cri-dockerd", adopted)
	}
}

// removeGoneUpstreamCheckpoints deletes upstream's checkpoints of sandboxes Docker no longer
// has once their network is torn down (no checkpoint of ours left): after the swap nothing
// lists them for the kubelet to remove, as upstream did. Runs after cleanUpOrphanNetworks.
func (s *Service) removeGoneUpstreamCheckpoints(ctx context.Context) {
	if s.opts.RootDirectory == "" || s.checkpoints == nil {
		return
	}
	for _, id := range s.goneUpstreamSandboxes(ctx) {
		if cp, err := s.checkpoints.get(id); cp != nil || err != nil {
			continue // its DEL failed: retried at the next start
		}
		s.releaseUpstreamLeftovers(ctx, id, nil, "")
		s.removeUpstreamCheckpoint(id)
		s.log.WithField("id", id).Info("removed upstream cri-dockerd's checkpoint of a sandbox that Docker no longer has")
	}
}

// goneUpstreamSandboxes lists the sandboxes that upstream cri-dockerd has a checkpoint of and
// Docker no longer has.
func (s *Service) goneUpstreamSandboxes(ctx context.Context) []string {
	var gone []string
	entries, _ := os.ReadDir(filepath.Join(s.opts.RootDirectory, upstreamCheckpointDir))
	for _, e := range entries {
		id := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(id, ".") {
			continue
		}
		if _, ok := s.sandboxes.get(id); ok {
			continue
		}
		if _, err := s.docker.InspectContainer(ctx, id); err == nil || !libdocker.IsNotFound(err) {
			continue
		}
		gone = append(gone, id)
	}
	return gone
}

// tearDownGoneUpstream adopts, for StopPodSandbox or RemovePodSandbox of a sandbox Docker no
// longer has, the network of an upstream sandbox from its checkpoint, so that the DEL runs.
func (s *Service) tearDownGoneUpstream(id string) {
	if s.upstreamCheckpointPath(id) == "" {
		return
	}
	if _, err := os.Stat(s.upstreamCheckpointPath(id)); err != nil {
		return
	}
	s.adoptGoneUpstream(id)
}
