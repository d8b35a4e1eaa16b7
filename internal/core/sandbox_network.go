package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/dockerid"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
	"github.com/cri-dockerd/cri-dockerd/internal/network/podcidr"
)

// Pod networking. With a namespaced plugin (CNI) a sandbox is created with NetworkMode none; once
// it runs, the plugin attaches its namespace (/proc/PID/ns/net). The attachment is written to
// the sandbox's checkpoint before the CNI ADD and again, with the pod's IPs, after it; the DEL
// at StopPodSandbox (or RemovePodSandbox) reads it back, also after a restart of cri-dockerd or
// when the sandbox container is gone, and then removes the checkpoint. With Docker's bridge
// (--network-plugin "" or none), Docker does all of it and nothing is checkpointed.

// planSandboxNetwork checks, before anything is created, that the pod can be networked; nil
// when the plugin has nothing to do (host network, or Docker's bridge).
func (s *Service) planSandboxNetwork(cfg *runtimeapi.PodSandboxConfig) (*network.Attachment, error) {
	bandwidth, err := network.BandwidthFromAnnotations(cfg.Annotations)
	if err != nil {
		return nil, invalidf("pod sandbox: %v", err)
	}
	if !s.net.Namespaced() || cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return nil, nil
	}
	m := cfg.Metadata
	pod := network.Pod{Namespace: m.Namespace, Name: m.Name, UID: m.Uid, Bandwidth: bandwidth}
	for _, pm := range cfg.PortMappings {
		pod.PortMappings = append(pod.PortMappings, network.PortMapping{
			HostPort: pm.HostPort, ContainerPort: pm.ContainerPort, Protocol: protocolName(pm.Protocol), HostIP: pm.HostIp,
		})
	}
	if dns := cfg.GetDnsConfig(); dns != nil {
		pod.DNS = &network.DNS{Servers: dns.Servers, Searches: dns.Searches, Options: dns.Options}
	}
	att, err := s.net.Plan(pod)
	if err != nil {
		return nil, networkError(err, "pod sandbox %s/%s", m.Namespace, m.Name)
	}
	return att, nil
}

func protocolName(p runtimeapi.Protocol) string {
	switch p {
	case runtimeapi.Protocol_UDP:
		return "udp"
	case runtimeapi.Protocol_SCTP:
		return "sctp"
	}
	return "tcp"
}

// networkError turns a network plugin's error into a gRPC status that keeps the plugin's words.
func networkError(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...) + ": " + err.Error()
	switch {
	case network.IsNotReady(err):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)
	}
	return status.Error(codes.Unknown, msg)
}

// setUpSandboxNetwork attaches the started sandbox id as planned. When it fails, what was done
// is undone (CNI DEL, checkpoint removed); the caller removes the container.
func (s *Service) setUpSandboxNetwork(ctx context.Context, id string, att *network.Attachment) error {
	unlock := s.netLocks.Lock(id)
	defer unlock()
	att.SandboxID = id
	cp := &sandboxCheckpoint{SandboxID: id, State: checkpointSettingUp, Network: att}
	if err := s.checkpoints.put(cp); err != nil {
		return status.Errorf(codes.Internal, "set up network of pod sandbox %q: %v", id, err)
	}
	netns, pid, err := s.runningNetNS(ctx, id)
	if err == nil {
		// Pinned, the namespace outlives the sandbox container until the DEL: a DEL in a live
		// namespace undoes everything (the bridge plugin's masquerade rules too).
		if _, perr := s.pins.Pin(id, pid); perr != nil {
			s.log.WithField("id", id).Warnf("the pod's network namespace is not pinned; should the sandbox die before its network is torn down, the DEL runs without it: %v", perr)
		}
		start := time.Now()
		err = s.net.SetUp(ctx, att, netns)
		s.log.WithFields(map[string]any{"id": id, "network": att.Network, "ips": att.IPs, "took": time.Since(start).Round(time.Millisecond)}).Debug("pod network set up")
	}
	if err == nil {
		cp.State = checkpointReady
		if err = s.checkpoints.put(cp); err != nil {
			err = status.Errorf(codes.Internal, "%v", err)
		}
	}
	if err != nil {
		s.undoSandboxNetwork(ctx, att, netns)
		if _, ok := status.FromError(err); ok {
			return err
		}
		return networkError(err, "set up network of pod sandbox %q", id)
	}
	return nil
}

// undoSandboxNetwork tears down a network whose set up failed, whatever the caller's context.
// The checkpoint stays when the DEL fails, so that the next start of cri-dockerd tries again.
func (s *Service) undoSandboxNetwork(ctx context.Context, att *network.Attachment, netns string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	log := s.log.WithField("id", att.SandboxID)
	if netns == "" {
		netns = s.pins.Path(att.SandboxID)
	}
	if err := s.net.TearDown(ctx, att, netns); err != nil {
		log.Errorf("tear down the network of a sandbox whose set up failed (retried at the next start): %v", err)
		return
	}
	if err := s.pins.Unpin(att.SandboxID); err != nil {
		log.Warn(err)
	}
	if err := s.checkpoints.remove(att.SandboxID); err != nil {
		log.Error(err)
	}
}

// runningNetNS is the network namespace of a running sandbox container, and its process.
func (s *Service) runningNetNS(ctx context.Context, id string) (string, int, error) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		return "", 0, dockerError(err, "inspect pod sandbox %q", id)
	}
	if ns := netNSPath(c); ns != "" {
		return ns, c.State.Pid, nil
	}
	msg := "exited right after it started"
	if c.State != nil && c.State.Error != "" {
		msg += ": " + c.State.Error
	}
	return "", 0, status.Errorf(codes.Unknown, "pod sandbox %q %s", id, msg)
}

// netNSPath is the network namespace of a sandbox's process; "" when it does not run.
func netNSPath(c *container.InspectResponse) string {
	if c == nil || c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return ""
	}
	return "/proc/" + strconv.Itoa(c.State.Pid) + "/ns/net"
}

// tearDownSandboxNetwork runs the DEL of sandbox id's network from its checkpoint (rebuilt
// when it is missing or damaged, sandbox_checkpoint_repair.go), and then releases the pinned
// namespace and removes the checkpoint. c is the sandbox container, nil when Docker no longer
// has it; when it does not run, the pinned namespace is used, if it is still there.
// Idempotent: once torn down, nothing says the network is up and there is nothing to do.
func (s *Service) tearDownSandboxNetwork(ctx context.Context, id string, c *container.InspectResponse) error {
	if s.checkpoints == nil {
		return nil
	}
	unlock := s.netLocks.Lock(id)
	defer unlock()
	cp, err := s.checkpoints.get(id)
	if err != nil || cp == nil {
		if cp, err = s.rebuildCheckpoint(id, c, err, true); err != nil {
			return err
		}
	}
	if cp == nil {
		s.repairs.forget(id)
		return s.pins.Unpin(id)
	}
	netns := netNSPath(c)
	if netns == "" {
		netns = s.pins.Path(id)
	}
	if cp.Network.Plugin != s.net.Name() {
		// Kept: a later start with that plugin tears it down (as the network of a sandbox gone).
		s.log.WithField("id", id).Warnf("the network of this sandbox was set up by network plugin %q, not by %q (--network-plugin): it is not torn down", cp.Network.Plugin, s.net.Name())
		return nil
	}
	if err := s.net.TearDown(ctx, cp.Network, netns); err != nil {
		return networkError(err, "tear down network of pod sandbox %q", id)
	}
	if err := s.pins.Unpin(id); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if err := s.checkpoints.remove(id); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	s.repairs.forget(id)
	return nil
}

// tearDownGoneSandbox tears down the network of a sandbox whose container is gone; id may be a
// unique prefix, as for the other calls, and names a checkpoint then. A full ID without one may
// still have libcni's record of its network.
func (s *Service) tearDownGoneSandbox(ctx context.Context, id string) error {
	if s.checkpoints == nil {
		return nil
	}
	full, err := s.checkpoints.resolve(id)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if full == "" && dockerid.IsFull(id) {
		full = id
	}
	if full == "" {
		return nil
	}
	return s.tearDownSandboxNetwork(ctx, full, nil)
}

// netnsPinner keeps sandboxes' network namespaces alive until their DEL (network.NetNSPins).
type netnsPinner interface {
	Pin(id string, pid int) (string, error)
	Path(id string) string
	Unpin(id string) error
}

// sandboxIPs reads the IPs of a namespaced sandbox from its checkpoint (rebuilt when it is
// missing or damaged); c is the sandbox container, nil when Docker no longer has it.
func (s *Service) sandboxIPs(id string, c *container.InspectResponse) (string, []*runtimeapi.PodIP) {
	if s.checkpoints == nil {
		return "", nil
	}
	cp, err := s.checkpoints.get(id)
	if err != nil || cp == nil {
		cp = s.checkpointForStatus(id, c, err)
	}
	if cp == nil || len(cp.Network.IPs) == 0 {
		return "", nil
	}
	var extra []*runtimeapi.PodIP
	for _, ip := range cp.Network.IPs[1:] {
		extra = append(extra, &runtimeapi.PodIP{Ip: ip})
	}
	return cp.Network.IPs[0], extra
}

// cleanUpOrphanNetworks tears down the networks of checkpointed sandboxes that Docker no longer
// has (a crash, or a set up whose undoing failed): nothing else would ever release their IPs.
// The sandbox index must be rebuilt first.
func (s *Service) cleanUpOrphanNetworks(ctx context.Context) {
	if s.checkpoints == nil {
		return
	}
	s.checkpoints.removeTemporaries()
	ids, err := s.checkpoints.ids()
	if err != nil {
		s.log.Warnf("list sandbox checkpoints: %v", err)
		return
	}
	for _, id := range ids {
		if _, ok := s.sandboxes.get(id); ok {
			continue
		}
		if _, err := s.docker.InspectContainer(ctx, id); err == nil || !libdocker.IsNotFound(err) {
			continue
		}
		if cp, err := s.checkpoints.get(id); (err == nil && cp != nil && cp.Network.Plugin != s.net.Name()) || (err != nil && !s.net.Namespaced()) {
			continue // another plugin's (or unreadable, with no plugin to rebuild it): kept for a start with one
		}
		if s.hasPodContainers(ctx, id) { // listed NOTREADY: its StopPodSandbox tears it down (sandbox_gone.go)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		err := s.tearDownSandboxNetwork(tctx, id, nil)
		cancel()
		if err != nil {
			s.log.WithField("id", id).Warnf("network of a removed sandbox not torn down yet (retried at the next start): %v", err)
			continue
		}
		s.log.WithField("id", id).Info("tore down the network of a sandbox that Docker no longer has")
	}
}

// openCheckpoints opens <root>/sandboxes and hands the plugin its pod CIDR.
func (s *Service) openCheckpoints() error {
	if s.opts.RootDirectory == "" {
		if s.net.Namespaced() {
			return fmt.Errorf("network plugin %q needs a root directory for its sandbox checkpoints", s.net.Name())
		}
		s.applyStartPodCIDR("")
		return nil
	}
	store, err := newCheckpointStore(filepath.Join(s.opts.RootDirectory, "sandboxes"))
	if err != nil {
		return err
	}
	s.checkpoints = store
	s.pins = network.NewNetNSPins(filepath.Join(s.opts.RootDirectory, "netns"))
	raw, err := os.ReadFile(s.podCIDRFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warnf("saved pod CIDR: %v", err)
	}
	s.applyStartPodCIDR(strings.TrimSpace(string(raw)))
	return nil
}

// applyStartPodCIDR gives the plugin the pod CIDR to start with: the one an earlier
// UpdateRuntimeConfig saved (the kubelet sends it once, not after each restart of
// cri-dockerd), else --pod-cidr; the kubelet's next UpdateRuntimeConfig replaces either.
func (s *Service) applyStartPodCIDR(saved string) {
	cidr, source := saved, s.podCIDRFile()
	if cidr == "" {
		cidr, source = s.opts.PodCIDR, "--pod-cidr"
	}
	if cidr == "" {
		return
	}
	if err := s.net.UpdatePodCIDR(cidr); err != nil {
		s.log.Warnf("pod CIDR %s from %s: %v", cidr, source, err)
		return
	}
	if saved != "" && s.opts.PodCIDR != "" && saved != s.opts.PodCIDR {
		s.log.Infof("pod CIDR %s (sent by the kubelet, saved in %s) wins over --pod-cidr %s", saved, source, s.opts.PodCIDR)
	}
}

func (s *Service) podCIDRFile() string {
	return filepath.Join(s.opts.RootDirectory, "pod-cidr")
}

// updatePodCIDR hands the kubelet's pod CIDR to the network plugin and saves it for restarts.
func (s *Service) updatePodCIDR(cidr string) error {
	cidrs, err := podcidr.Parse(cidr)
	if err != nil {
		return invalidf("runtime config: pod_cidr: %v", err)
	}
	cidr = strings.Join(cidrs, ",")
	if err := s.net.UpdatePodCIDR(cidr); err != nil {
		return invalidf("runtime config: %v", err)
	}
	if s.checkpoints == nil {
		return nil
	}
	if old, err := os.ReadFile(s.podCIDRFile()); err == nil && strings.TrimSpace(string(old)) == cidr {
		return nil
	}
	if err := writeFileAtomic(s.podCIDRFile(), []byte(cidr+"\n")); err != nil {
		return status.Errorf(codes.Internal, "save pod CIDR: %v", err)
	}
	return nil
}
