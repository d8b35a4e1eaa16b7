package core

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// A sandbox checkpoint can be lost or damaged behind our back (a disk that lost the file, a
// cleanup script, a full disk under another writer). The pod's network is still up then, and
// its IP lease is held until a DEL. libcni keeps a record of its own of every ADD under
// --cni-cache-dir (the network's config, CNI_ARGS, capability arguments and result), which is
// what a DEL needs: the checkpoint is rebuilt from it (Adopter.Adopt, as for upstream's pods),
// with what the sandbox container still tells (its name, its running namespace), and written
// again, so that status, stop, remove and the clean up at start go on as before.
//
// What says the network is up: an unreadable checkpoint (a torn down network has none), a
// pinned namespace (unpinned by the tear down before the checkpoint goes), libcni's record,
// or, for a tear down, addresses in the running sandbox's namespace. With none of them the
// network is torn down already (a second StopPodSandbox). With one of them but nothing to run a
// DEL from, the tear down fails with DataLoss saying what is missing: the lease must not leak
// silently.
//
// The namespace of the DEL is the running sandbox's, else its pin, else none (the CNI spec
// allows a DEL without one). The ADD's cached netns is never used: it is /proc/PID/ns/net of
// a pause process that may be gone, and the PID may now be another pod's.

// checkpointRepairs remembers, per start of cri-dockerd, the sandboxes whose checkpoint a
// status could not rebuild (so that it does not search libcni's cache at every call) and those
// whose trouble was logged (once).
type checkpointRepairs struct {
	mu     sync.Mutex
	tried  map[string]bool
	logged map[string]bool
}

// firstTry reports whether a status has not tried to rebuild id's checkpoint yet, and marks it.
func (r *checkpointRepairs) firstTry(id string) bool {
	return r.mark(&r.tried, id)
}

// firstLog reports whether id's checkpoint trouble has not been logged yet, and marks it.
func (r *checkpointRepairs) firstLog(id string) bool {
	return r.mark(&r.logged, id)
}

func (r *checkpointRepairs) mark(set *map[string]bool, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if (*set)[id] {
		return false
	}
	if *set == nil {
		*set = map[string]bool{}
	}
	(*set)[id] = true
	return true
}

// forget drops what is remembered of id: its checkpoint is good again, or gone with its network.
func (r *checkpointRepairs) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tried, id)
	delete(r.logged, id)
}

// checkpointForStatus rebuilds, for PodSandboxStatus, the missing or unreadable (readErr)
// checkpoint of sandbox id; c is its container, nil when Docker no longer has it. Tried once per
// sandbox, and only when the checkpoint is unreadable or the namespace still pinned: a pod torn
// down, or never set up, costs nothing. nil when it cannot be rebuilt (logged once).
func (s *Service) checkpointForStatus(id string, c *container.InspectResponse, readErr error) *sandboxCheckpoint {
	if readErr == nil && (s.pins.Path(id) == "" || c != nil && createdByUpstream(c.Config.Labels)) {
		return nil // torn down, never set up, or upstream's pod (sandbox_adopt.go)
	}
	if !s.repairs.firstTry(id) {
		return nil
	}
	unlock := s.netLocks.Lock(id)
	defer unlock()
	cp, err := s.checkpoints.get(id) // again: written, or torn down, meanwhile?
	if cp != nil || (err == nil && readErr != nil) {
		return cp
	}
	cp, _ = s.rebuildCheckpoint(id, c, err, false)
	return cp
}

// rebuildCheckpoint rebuilds and writes the checkpoint of sandbox id, missing or unreadable
// (readErr), from libcni's cache, and for a tear down also from the addresses in its running
// namespace. nil without error when nothing says the network is up; a DataLoss error when
// something does but no DEL could be made. The caller holds netLocks for id.
func (s *Service) rebuildCheckpoint(id string, c *container.InspectResponse, readErr error, forTearDown bool) (*sandboxCheckpoint, error) {
	if c != nil && (c.HostConfig == nil || !c.HostConfig.NetworkMode.IsNone()) {
		// Docker networks it (host network, Docker's bridge): no checkpoint of ours is needed.
		if readErr != nil {
			s.log.WithField("id", id).Warnf("dropping an unreadable checkpoint of a sandbox that Docker networks: %v", readErr)
			if err := s.checkpoints.remove(id); err != nil {
				return nil, status.Errorf(codes.Internal, "%v", err)
			}
		}
		return nil, nil
	}
	att, addrs, warnings := s.attachmentFromCache(id, c, forTearDown)
	if att == nil {
		signs := s.signsOfNetwork(id, readErr, addrs)
		if len(signs) == 0 {
			return nil, nil
		}
		return nil, s.unrecoverableCheckpoint(id, c, signs, warnings)
	}
	cp := &sandboxCheckpoint{SandboxID: id, State: checkpointReady, Network: att}
	more, err := s.keepAttachment(cp, runningPid(c))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "rebuild the network checkpoint of pod sandbox %q: %v", id, err)
	}
	s.logRebuilt(id, podNameOf(c, att), att, readErr, append(warnings, more...))
	s.repairs.forget(id)
	return cp, nil
}

// attachmentFromCache is sandbox id's attachment as libcni's cache holds it; for a tear down
// without a cache entry, as its running namespace holds it (addrs: the DEL then uses the
// network's current config, best effort). nil when neither does; the warnings say what is
// missing.
func (s *Service) attachmentFromCache(id string, c *container.InspectResponse, forTearDown bool) (att *network.Attachment, addrs []string, warnings []string) {
	a := s.adopter()
	if a == nil {
		return nil, nil, []string{fmt.Sprintf("network plugin %q keeps no record of its own to rebuild it from", s.net.Name())}
	}
	pod := podOfSandbox(id, c)
	att, warnings = a.Adopt(pod, nil)
	nsPath := netNSPath(c)
	if att != nil || !forTearDown || nsPath == "" {
		return att, nil, warnings
	}
	addrs, err := s.adoptions.ips(nsPath)
	if err != nil {
		return nil, nil, append(warnings, fmt.Sprintf("read the pod's addresses from its network namespace: %v", err))
	}
	if len(addrs) == 0 {
		return nil, nil, warnings
	}
	att, more := a.Adopt(pod, addrs)
	warnings = append(warnings, more...)
	if att != nil && att.Network == "" {
		return nil, addrs, append(warnings, "no CNI network is configured now")
	}
	return att, addrs, warnings
}

// signsOfNetwork lists what says that sandbox id's network is still up: an unreadable
// checkpoint (readErr), a pinned namespace, addresses in its running namespace.
func (s *Service) signsOfNetwork(id string, readErr error, addrs []string) []string {
	var signs []string
	if pin := s.pins.Path(id); pin != "" {
		signs = append(signs, "its network namespace is still pinned at "+pin)
	}
	if len(addrs) > 0 {
		signs = append(signs, "its network namespace still has "+strings.Join(addrs, ", "))
	}
	switch {
	case readErr != nil:
		signs = append([]string{readErr.Error()}, signs...)
	case len(signs) > 0:
		signs = append([]string{"its checkpoint " + s.checkpoints.path(id) + " is missing"}, signs...)
	}
	return signs
}

// podOfSandbox is what the sandbox's container name tells of its pod; only the ID without a
// container (the cache's CNI_ARGS give the rest).
func podOfSandbox(id string, c *container.InspectResponse) network.Pod {
	pod := network.Pod{SandboxID: id}
	if c == nil {
		return pod
	}
	if name, err := parseName(c.Name); err == nil {
		pod.Namespace, pod.Name, pod.UID = name.namespace, name.pod, name.uid
	}
	return pod
}

func runningPid(c *container.InspectResponse) int {
	if netNSPath(c) == "" {
		return 0
	}
	return c.State.Pid
}

// keepAttachment writes cp, pinning the namespace of pid first (when it runs and is not pinned
// yet: the DEL then finds the pod's interface also should the sandbox die first). A pin that
// fails is a warning; a write that fails undoes the pin.
func (s *Service) keepAttachment(cp *sandboxCheckpoint, pid int) (warnings []string, err error) {
	id := cp.SandboxID
	pinned := false
	if pid > 0 && s.pins.Path(id) == "" {
		if _, err := s.pins.Pin(id, pid); err != nil {
			warnings = append(warnings, fmt.Sprintf("the pod's network namespace is not pinned: %v", err))
		} else {
			pinned = true
		}
	}
	if err := s.checkpoints.put(cp); err != nil {
		if pinned {
			_ = s.pins.Unpin(id)
		}
		return nil, err
	}
	return warnings, nil
}

// unrecoverableCheckpoint is the DataLoss error of a sandbox whose network is up (signs) but
// whose DEL has nothing to run from; logged once.
func (s *Service) unrecoverableCheckpoint(id string, c *container.InspectResponse, signs, warnings []string) error {
	msg := fmt.Sprintf("pod sandbox %q (%s): the CNI DEL of its network cannot run, and its IP lease would leak: %s; and nothing else tells how its network was attached (%s). Release the pod's network by hand, then remove its checkpoint file and its pin (unmount it first), whichever exist",
		id, podNameOf(c, nil), strings.Join(signs, "; "), strings.Join(warnings, "; "))
	if s.repairs.firstLog(id) {
		s.log.WithField("id", id).Error(msg)
	}
	return status.Error(codes.DataLoss, msg)
}

// logRebuilt says that a checkpoint was rebuilt, and from what (once: it reads well from then on).
func (s *Service) logRebuilt(id, pod string, att *network.Attachment, readErr error, warnings []string) {
	from := "libcni's cache"
	if att.ConfFile != network.CachedConfFile {
		from = "its running namespace's addresses and network " + strconv.Quote(att.Network) + "'s current config"
	}
	why := "it was missing"
	if readErr != nil {
		why = fmt.Sprintf("it could not be read: %v", readErr)
	}
	log := s.log.WithFields(map[string]any{"id": id, "pod": pod})
	log.Warnf("rebuilt the network checkpoint of a pod sandbox from %s (%s)", from, why)
	for _, w := range warnings {
		log.Warnf("rebuilt checkpoint: %s", w)
	}
}

// podNameOf is namespace/name of a sandbox's pod, from the kubelet's labels on its container,
// else from the container's name, else from its attachment; "unknown pod" when none tells.
func podNameOf(c *container.InspectResponse, att *network.Attachment) string {
	if c != nil && c.Config != nil {
		if ns, name := c.Config.Labels["io.kubernetes.pod.namespace"], c.Config.Labels["io.kubernetes.pod.name"]; ns != "" && name != "" {
			return ns + "/" + name
		}
	}
	if c != nil {
		if name, err := parseName(c.Name); err == nil {
			return name.namespace + "/" + name.pod
		}
	}
	if att != nil && att.Name != "" {
		return att.Namespace + "/" + att.Name
	}
	return "unknown pod"
}
