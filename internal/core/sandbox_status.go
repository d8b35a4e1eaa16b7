package core

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// inspectSandbox inspects a sandbox container; NotFound when id names no sandbox of ours.
func (s *Service) inspectSandbox(ctx context.Context, id string) (*container.InspectResponse, error) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return nil, notFoundf("pod sandbox %q not found", id)
		}
		return nil, dockerError(err, "inspect pod sandbox %q", id)
	}
	if c.Config == nil || c.Config.Labels[containerTypeLabel] != containerTypeSandbox {
		return nil, notASandboxError{notFoundf("pod sandbox %q not found: it is not a pod sandbox", id)}
	}
	return c, nil
}

// notASandboxError is inspectSandbox's NotFound for an ID that names a Docker container other than
// a sandbox (a CRI container, one made with docker run): StopPodSandbox and RemovePodSandbox
// answer it as it is, where a sandbox that is not there at all is their idempotent success.
type notASandboxError struct{ error }

func (e notASandboxError) GRPCStatus() *status.Status { return status.Convert(e.error) }

func isNotASandbox(err error) bool {
	var e notASandboxError
	return errors.As(err, &e)
}

func isNotFoundStatus(err error) bool {
	return status.Code(err) == codes.NotFound
}

// PodSandboxStatus reports a sandbox from one Docker inspect (no process is forked), with
// the statuses of all its containers and the time they were read from: the kubelet's Evented
// PLEG then takes the pod's whole status from this one call.
func (s *Service) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	id := req.GetPodSandboxId()
	if id == "" {
		return nil, invalidf("pod_sandbox_id is required")
	}
	if s.nriPending.hasPrefix(id) {
		return nil, errNRIPending(id)
	}
	// Taken before anything is read: the kubelet keeps a pod's status only if it is newer
	// than the one it has.
	at := time.Now()
	resp, err := s.podSandboxStatus(ctx, id, req.Verbose)
	if err != nil {
		return nil, err
	}
	if resp.ContainersStatuses, err = s.podContainerStatuses(ctx, resp.Status.Id); err != nil {
		return nil, err
	}
	resp.Timestamp = at.UnixNano()
	return resp, nil
}

// podContainerStatuses are the statuses, as ContainerStatus gives them, of every container of
// sandbox sandboxID: what PodSandboxStatus and each container event carry.
func (s *Service) podContainerStatuses(ctx context.Context, sandboxID string) ([]*runtimeapi.ContainerStatus, error) {
	list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID}})
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.ContainerStatus, 0, len(list.Containers))
	for _, c := range list.Containers {
		st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		switch {
		case err == nil:
			out = append(out, st.Status)
		case !dockerUnreachable(err): // removed since the list, say: not the pod's any more
		default:
			return nil, err
		}
	}
	return out, nil
}

// podSandboxStatus is PodSandboxStatus without its containers.
func (s *Service) podSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	c, err := s.inspectSandbox(ctx, id)
	if isNotFoundStatus(err) {
		// Removed behind our back: NOTREADY while its containers or checkpoint are left.
		g, gerr := s.findGoneSandbox(ctx, id)
		if gerr != nil {
			return nil, gerr
		}
		if g != nil {
			return s.goneSandboxStatus(g, verbose), nil
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	name, err := parseName(c.Name)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "pod sandbox %q: %v", id, err)
	}
	labels, annotations := splitLabels(c.Config.Labels)
	st := &runtimeapi.PodSandboxStatus{
		Id:             c.ID,
		Metadata:       name.sandboxMetadata(),
		State:          runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		CreatedAt:      parseDockerTime(c.Created),
		Labels:         labels,
		Annotations:    annotations,
		RuntimeHandler: c.Config.Labels[handlerLabel],
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: namespaceMode(c.HostConfig.NetworkMode.IsHost()),
			Pid:     namespaceMode(c.HostConfig.PidMode.IsHost()),
			Ipc:     namespaceMode(c.HostConfig.IpcMode.IsHost()),
		}}},
	}
	if c.State != nil && c.State.Running {
		st.State = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	pod := settingsOf(c.HostConfig, c.Config.Labels)
	s.sandboxes.remember(c.ID, sandboxRecord{
		metadata: st.Metadata, labels: labels, annotations: annotations, createdAt: st.CreatedAt,
		handler: st.RuntimeHandler, namespaces: st.Linux.Namespaces.Options, pod: &pod,
	})
	switch {
	case c.HostConfig.NetworkMode.IsNone():
		// Attached by the network plugin: its IPs are in the checkpoint, not in Docker.
		// A running sandbox of upstream cri-dockerd gets its checkpoint first (sandbox_adopt.go).
		s.adoptIfUpstream(ctx, c)
		st.Network.Ip, st.Network.AdditionalIps = s.sandboxIPs(c.ID, c)
	case !c.HostConfig.NetworkMode.IsHost():
		st.Network.Ip, st.Network.AdditionalIps = podIPs(c)
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st}
	if verbose {
		raw, _ := json.Marshal(c)
		resp.Info = map[string]string{"info": string(raw)}
	}
	return resp, nil
}

func namespaceMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// podIPs reads the sandbox's addresses from Docker's network settings.
func podIPs(c *container.InspectResponse) (string, []*runtimeapi.PodIP) {
	if c.NetworkSettings == nil {
		return "", nil
	}
	var ips []string
	for _, n := range c.NetworkSettings.Networks {
		if n == nil {
			continue
		}
		if n.IPAddress != "" {
			ips = append([]string{n.IPAddress}, ips...)
		}
		if n.GlobalIPv6Address != "" {
			ips = append(ips, n.GlobalIPv6Address)
		}
	}
	if len(ips) == 0 {
		return "", nil
	}
	var extra []*runtimeapi.PodIP
	for _, ip := range ips[1:] {
		extra = append(extra, &runtimeapi.PodIP{Ip: ip})
	}
	return ips[0], extra
}

// parseDockerTime turns Docker's RFC 3339 times into Unix nanoseconds (0 for Docker's zero time).
func parseDockerTime(value string) int64 {
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil || t.IsZero() || t.Year() <= 1 {
		return 0
	}
	return t.UnixNano()
}
