package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/nri"
	"github.com/cri-dockerd/cri-dockerd/internal/version"
)

// NRI (internal/nri) hears of each pod and container of ours as containerd's NRI does: the
// events are sent where the CRI call happens, with the pod and container as Docker has them
// (inspected), and only while a plugin is connected, so that a node without plugins pays
// nothing. A sandbox whose RunPodSandbox hook runs is not listed, has no status, and takes no
// container (nriPending), as the NRI contract says.

// startNRI hosts NRI, or says once why not.
func (s *Service) startNRI() {
	h, err := nri.New(s.opts.NRI, "cri-dockerd", version.Version, s, s.log)
	if err == nil {
		err = h.Start()
	}
	switch {
	case err != nil: // nri.ErrSocketTaken among others
		s.log.Warnf("NRI is off: %v", err)
		s.nriState = "off: " + err.Error()
	case h == nil:
		s.nriState = "off (--nri=false)"
	default:
		s.nri = h
		s.nriState = "on, socket " + s.opts.NRI.SocketPath
		s.log.WithField("socket", s.opts.NRI.SocketPath).Info("NRI: hosting plugins")
	}
}

// NRIState says whether NRI is hosted, and why not (crictl info shows it too).
func (s *Service) NRIState() string { return s.nriState }

// nriPending are the sandboxes whose RunPodSandbox hook runs and the containers whose
// CreateContainer hook runs.
type nriPending struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (p *nriPending) set(id string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil {
		p.ids = map[string]bool{}
	}
	if on {
		p.ids[id] = true
	} else {
		delete(p.ids, id)
	}
}

func (p *nriPending) has(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[id]
}

// hasPrefix reports whether a pending ID starts with id, as the CRI's IDs may be cut.
func (p *nriPending) hasPrefix(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pending := range p.ids {
		if strings.HasPrefix(pending, id) {
			return true
		}
	}
	return false
}

// any reports whether anything is pending: lists filter only then.
func (p *nriPending) any() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids) > 0
}

// withoutPending is a list without what is pending: a copy, as lists may be kept and shared.
func withoutPending[T any](p *nriPending, items []T, id func(T) string) []T {
	out := make([]T, 0, len(items))
	for _, item := range items {
		if !p.has(id(item)) {
			out = append(out, item)
		}
	}
	return out
}

// errNRIPending is the answer about a sandbox whose RunPodSandbox hook runs.
func errNRIPending(id string) error {
	return status.Errorf(codes.NotFound, "pod sandbox %q: not ready yet (an NRI plugin's RunPodSandbox hook is running)", id)
}

// nriActive reports whether events must be sent: NRI on and a plugin connected.
func (s *Service) nriActive() bool { return s.nri.Plugins() > 0 }

// nriPodOf is a sandbox container as plugins see it.
func nriPodOf(c *container.InspectResponse) *api.PodSandbox {
	name, _ := parseName(c.Name)
	labels, annotations := splitLabels(c.Config.Labels)
	pod := &api.PodSandbox{
		Id: c.ID, Name: name.pod, Uid: name.uid, Namespace: name.namespace,
		Labels: labels, Annotations: annotations, RuntimeHandler: c.Config.Labels[handlerLabel],
		Linux: &api.LinuxPodSandbox{CgroupParent: c.HostConfig.CgroupParent},
	}
	if c.State != nil && c.State.Pid > 0 {
		pod.Pid = uint32(c.State.Pid)
	}
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.IPAddress != "" {
				pod.Ips = append(pod.Ips, n.IPAddress)
			}
		}
	}
	return pod
}

// nriContainerOf is a container as plugins see it.
func nriContainerOf(c *container.InspectResponse) *api.Container {
	name, _ := parseName(c.Name)
	labels, annotations := splitLabels(c.Config.Labels)
	ctr := &api.Container{
		Id: c.ID, PodSandboxId: c.Config.Labels[sandboxIDLabel], Name: name.container,
		Labels: labels, Annotations: annotations,
		Args: append(append([]string(nil), c.Config.Entrypoint...), c.Config.Cmd...),
		Env:  c.Config.Env,
	}
	if c.State != nil {
		ctr.State = nriState(c.State)
		ctr.Pid = uint32(max(c.State.Pid, 0))
		ctr.ExitCode = int32(c.State.ExitCode)
		ctr.CreatedAt = parseDockerTime(c.Created)
		ctr.StartedAt = parseDockerTime(c.State.StartedAt)
		ctr.FinishedAt = parseDockerTime(c.State.FinishedAt)
	}
	for _, m := range c.Mounts {
		opts := []string{"rbind"}
		if !m.RW {
			opts = append(opts, "ro")
		}
		ctr.Mounts = append(ctr.Mounts, &api.Mount{Destination: m.Destination, Source: m.Source, Type: "bind", Options: opts})
	}
	if hc := c.HostConfig; hc != nil {
		// No cgroups path: Docker makes it from the parent, its cgroup driver and the ID.
		ctr.Linux = &api.LinuxContainer{Resources: nriResources(&hc.Resources)}
		if hc.OomScoreAdj != 0 {
			ctr.Linux.OomScoreAdj = &api.OptionalInt{Value: int64(hc.OomScoreAdj)}
		}
	}
	return ctr
}

func nriState(st *container.State) api.ContainerState {
	switch {
	case st.Paused:
		return api.ContainerState_CONTAINER_PAUSED
	case st.Running:
		return api.ContainerState_CONTAINER_RUNNING
	case st.Status == "created":
		return api.ContainerState_CONTAINER_CREATED
	}
	return api.ContainerState_CONTAINER_STOPPED
}

// nriResources are Docker's resources in NRI's terms.
func nriResources(r *container.Resources) *api.LinuxResources {
	out := &api.LinuxResources{
		Cpu: &api.LinuxCPU{
			Cpus: r.CpusetCpus, Mems: r.CpusetMems,
		},
		Memory: &api.LinuxMemory{},
	}
	if r.CPUShares > 0 {
		out.Cpu.Shares = &api.OptionalUInt64{Value: uint64(r.CPUShares)}
	}
	if r.CPUQuota != 0 {
		out.Cpu.Quota = &api.OptionalInt64{Value: r.CPUQuota}
	}
	if r.CPUPeriod > 0 {
		out.Cpu.Period = &api.OptionalUInt64{Value: uint64(r.CPUPeriod)}
	}
	if r.Memory > 0 {
		out.Memory.Limit = &api.OptionalInt64{Value: r.Memory}
	}
	if r.MemorySwap != 0 {
		out.Memory.Swap = &api.OptionalInt64{Value: r.MemorySwap}
	}
	if r.PidsLimit != nil && *r.PidsLimit > 0 {
		out.Pids = &api.LinuxPids{Limit: *r.PidsLimit}
	}
	return out
}

// nriViews inspects a container and its sandbox for an event; ok is false when either is gone
// (nothing to tell).
func (s *Service) nriViews(ctx context.Context, id string) (*api.PodSandbox, *api.Container, bool) {
	ctr, ok := s.nriContainer(ctx, id)
	if !ok {
		return nil, nil, false
	}
	sb, err := s.docker.InspectContainer(ctx, ctr.PodSandboxId)
	if err != nil {
		return nil, nil, false
	}
	return nriPodOf(sb), ctr, true
}

// nriContainer inspects a container of ours (not a sandbox) for an event whose pod is known.
func (s *Service) nriContainer(ctx context.Context, id string) (*api.Container, bool) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil || c.Config == nil || c.Config.Labels[containerTypeLabel] != containerTypeContainer {
		return nil, false
	}
	return nriContainerOf(c), true
}

// nriSandbox inspects a sandbox for an event.
func (s *Service) nriSandbox(ctx context.Context, id string) (*api.PodSandbox, bool) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		return nil, false
	}
	return nriPodOf(c), true
}

// PodsAndContainers is every pod and container of ours, for a plugin that connects.
func (s *Service) PodsAndContainers(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(containerTypeLabel)})
	if err != nil {
		return nil, nil, err
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, c := range list {
		if s.nriPending.has(c.ID) {
			continue
		}
		in, err := s.docker.InspectContainer(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		switch in.Config.Labels[containerTypeLabel] {
		case containerTypeSandbox:
			pods = append(pods, nriPodOf(in))
		case containerTypeContainer:
			ctrs = append(ctrs, nriContainerOf(in))
		}
	}
	return pods, ctrs, nil
}

// UpdateContainers applies the resources plugins set for containers on their own.
func (s *Service) UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	var errs []error
	for _, u := range updates {
		res := u.GetLinux().GetResources()
		if res == nil {
			continue
		}
		r, err := dockerResourcesOf(res)
		if err == nil {
			_, err = s.docker.UpdateContainer(ctx, u.GetContainerId(), container.UpdateConfig{Resources: r})
		}
		if err != nil && !u.GetIgnoreFailure() {
			failed = append(failed, u)
			errs = append(errs, fmt.Errorf("container %s: %w", u.GetContainerId(), err))
		}
	}
	return failed, errors.Join(errs...)
}

// dockerResourcesOf is an NRI resources update in Docker's terms: what Docker's update can
// set; anything else is an error naming it.
func dockerResourcesOf(r *api.LinuxResources) (container.Resources, error) {
	var out container.Resources
	if c := r.GetCpu(); c.GetRealtimeRuntime() != nil || c.GetRealtimePeriod() != nil {
		return out, errors.New("cpu realtime runtime and period: Docker cannot update them")
	}
	nriCPUAndMemory(r, &out)
	if p := r.GetPids(); p != nil && p.GetLimit() > 0 {
		limit := p.GetLimit()
		out.PidsLimit = &limit
	}
	return out, nil
}

// nriRunPodSandbox tells plugins of sandbox id, which runs, and hides it while they hear of
// it. Their error fails the pod: it is stopped and removed (plugins hear of neither) and the
// error returned.
func (s *Service) nriRunPodSandbox(ctx context.Context, id string) error {
	if !s.nriActive() {
		return nil
	}
	defer s.nri.BlockSync()()
	s.nriPending.set(id, true)
	defer s.nriPending.set(id, false)
	pod, ok := s.nriSandbox(ctx, id)
	err := errors.New("the sandbox container is gone")
	if ok {
		err = s.nri.RunPodSandbox(ctx, pod)
	}
	if err == nil {
		return nil
	}
	cctx := context.WithoutCancel(ctx)
	if _, serr := s.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); serr != nil {
		s.log.WithField("id", id).Warnf("stop of a sandbox that NRI failed: %v", serr)
	} else if _, rerr := s.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); rerr != nil {
		s.log.WithField("id", id).Warnf("removal of a sandbox that NRI failed: %v", rerr)
	}
	return status.Errorf(codes.Unknown, "NRI: RunPodSandbox %s: %v", id, err)
}

// nriStopPodSandbox tells plugins of a running sandbox being stopped, after its containers
// (each told of first): the sandbox is still there while they hear of it. A plugin's error is
// logged, as containerd does: the stop goes on.
func (s *Service) nriStopPodSandbox(ctx context.Context, sandbox *container.InspectResponse, containers []container.Summary) {
	if !s.nriActive() || s.nriPending.has(sandbox.ID) || sandbox.State == nil || !sandbox.State.Running {
		return
	}
	pod := nriPodOf(sandbox)
	for _, c := range containers {
		if ctr, ok := s.nriContainer(ctx, c.ID); ok { // the pod is known: one inspect each
			if err := s.nri.StopContainer(ctx, pod, ctr); err != nil {
				s.log.WithField("id", c.ID).Warnf("NRI: StopContainer: %v", err)
			}
		}
	}
	if err := s.nri.StopPodSandbox(ctx, pod); err != nil {
		s.log.WithField("id", sandbox.ID).Warnf("NRI: StopPodSandbox: %v", err)
	}
}

// nriRemovePodSandbox tells plugins of a sandbox removed (pod, as inspected before).
func (s *Service) nriRemovePodSandbox(ctx context.Context, pod *api.PodSandbox) {
	if pod == nil || !s.nriActive() || s.nriPending.has(pod.GetId()) {
		return
	}
	if err := s.nri.RemovePodSandbox(ctx, pod); err != nil {
		s.log.WithField("id", pod.GetId()).Warnf("NRI: RemovePodSandbox: %v", err)
	}
}

// nriCreateContainer asks plugins about container id, just created in Docker as name from cfg
// and hc, and returns the container to keep. Plugins know a container by its ID and Docker
// gives the ID at its create, so they hear of a container after Docker's create, while it is
// hidden. With an adjustment, which Docker cannot apply to a container it has, the container
// is made again with it: plugins hear of the first one's stop and removal and of the new one,
// whose adjustment must then change nothing (docs/nri.md). On error nothing is left.
func (s *Service) nriCreateContainer(ctx context.Context, id, name string, cfg *container.Config, hc *container.HostConfig) (string, error) {
	adj, err := s.nriAskCreate(ctx, id)
	if err != nil {
		s.removeAfterFailure(context.WithoutCancel(ctx), id)
		return "", err
	}
	if len(adjustedFields(adj)) == 0 {
		return id, nil
	}
	caps := dockerCaps{APIVersion: s.docker.APIVersion()}
	if info, err := s.runtimes.get(ctx); err == nil {
		caps.CDI = len(info.CDISpecDirs) > 0
	}
	err = applyNRIAdjustment(adj, cfg, hc, caps)
	s.nriUndoCreate(ctx, id)
	if err != nil {
		return "", err
	}
	id2, err := s.createContainer(ctx, name, cfg, hc)
	if err != nil {
		return "", dockerError(err, "create container %q again with the NRI plugins' adjustment", name)
	}
	adj2, err := s.nriAskCreate(ctx, id2)
	if err == nil && !adjustsNothing(adj2, cfg, hc, caps) {
		err = status.Errorf(codes.FailedPrecondition, "NRI: CreateContainer %s: plugins adjusted the container made with their adjustment again (%s): their answer must be the same for the same container", id2, strings.Join(adjustedFields(adj2), ", "))
		s.nriUndoCreate(ctx, id2)
	}
	if err != nil {
		s.removeAfterFailure(context.WithoutCancel(ctx), id2)
		return "", err
	}
	return id2, nil
}

// nriAskCreate tells plugins of container id, hidden meanwhile, and returns their adjustment;
// on error they have heard of its removal.
func (s *Service) nriAskCreate(ctx context.Context, id string) (*api.ContainerAdjustment, error) {
	s.nriPending.set(id, true)
	defer s.nriPending.set(id, false)
	pod, ctr, ok := s.nriViews(ctx, id)
	if !ok {
		return nil, status.Errorf(codes.Internal, "NRI: CreateContainer %s: the container or its sandbox is gone", id)
	}
	adj, err := s.nri.CreateContainer(ctx, pod, ctr)
	if err != nil {
		s.nriRemoveContainer(context.WithoutCancel(ctx), pod, ctr)
		return nil, status.Errorf(codes.Unknown, "NRI: CreateContainer %s: %v", id, err)
	}
	return adj, nil
}

// nriPostCreate tells plugins of container id, created.
func (s *Service) nriPostCreate(ctx context.Context, id string) {
	if pod, ctr, ok := s.nriViews(ctx, id); ok {
		if err := s.nri.PostCreateContainer(ctx, pod, ctr); err != nil {
			s.log.WithField("id", id).Warnf("NRI: PostCreateContainer: %v", err)
		}
	}
}

// nriUndoCreate removes container id, which plugins heard of, telling them of its stop and
// removal as containerd does for a create that failed.
func (s *Service) nriUndoCreate(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	pod, ctr, ok := s.nriViews(ctx, id)
	s.removeAfterFailure(ctx, id)
	if ok {
		s.nriRemoveContainer(ctx, pod, ctr)
	}
}

// adjustsNothing reports whether adj, applied to the configuration a container was made with,
// leaves it as it is.
func adjustsNothing(adj *api.ContainerAdjustment, cfg *container.Config, hc *container.HostConfig, caps dockerCaps) bool {
	if len(adjustedFields(adj)) == 0 {
		return true
	}
	var cfg2 container.Config
	var hc2 container.HostConfig
	if !jsonCopy(cfg, &cfg2) || !jsonCopy(hc, &hc2) || applyNRIAdjustment(adj, &cfg2, &hc2, caps) != nil {
		return false
	}
	a, _ := json.Marshal([]any{cfg, hc})
	b, _ := json.Marshal([]any{&cfg2, &hc2})
	return bytes.Equal(a, b)
}

func jsonCopy(from, to any) bool {
	b, err := json.Marshal(from)
	return err == nil && json.Unmarshal(b, to) == nil
}

// adjustedFields names what an adjustment sets, field by field ("linux.resources.cpu.shares"):
// adaptation's merged answer carries empty messages where no plugin set anything.
func adjustedFields(a *api.ContainerAdjustment) []string {
	if a == nil {
		return nil
	}
	var out []string
	setFields(a.ProtoReflect(), "", &out)
	return out
}

func setFields(m protoreflect.Message, prefix string, out *[]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		// A nested message counts by what it sets; NRI's Optional* wrappers by being there.
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && !strings.HasPrefix(string(fd.Message().Name()), "Optional") {
			setFields(v.Message(), name+".", out)
			return true
		}
		*out = append(*out, name)
		return true
	})
}

// nriStartContainer tells plugins of a container about to start (their error fails the
// start) or, with post, started.
func (s *Service) nriStartContainer(ctx context.Context, id string, post bool) error {
	if !s.nriActive() {
		return nil
	}
	pod, ctr, ok := s.nriViews(ctx, id)
	if !ok {
		return nil
	}
	if post {
		if err := s.nri.PostStartContainer(ctx, pod, ctr); err != nil {
			s.log.WithField("id", id).Warnf("NRI: PostStartContainer: %v", err)
		}
		return nil
	}
	if err := s.nri.StartContainer(ctx, pod, ctr); err != nil {
		return status.Errorf(codes.Unknown, "NRI: StartContainer %s: %v", id, err)
	}
	return nil
}

// nriStopContainer tells plugins of a container that stopped (by StopContainer, or on its own:
// Docker's die event); once, whichever comes first.
func (s *Service) nriStopContainer(ctx context.Context, id string) {
	if !s.nriActive() {
		return
	}
	if pod, ctr, ok := s.nriViews(ctx, id); ok {
		if err := s.nri.StopContainer(ctx, pod, ctr); err != nil {
			s.log.WithField("id", id).Warnf("NRI: StopContainer: %v", err)
		}
	}
}

// nriRemoveContainer tells plugins of a container removed (pod and ctr as inspected before).
func (s *Service) nriRemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) {
	if ctr == nil || !s.nriActive() {
		return
	}
	if err := s.nri.RemoveContainer(ctx, pod, ctr); err != nil {
		s.log.WithField("id", ctr.GetId()).Warnf("NRI: RemoveContainer: %v", err)
	}
}

// nriUpdateContainer asks plugins about a container's new resources: what they answer is what
// Docker is asked to set (CPU, memory and pids; the rest stays as the kubelet asked).
func (s *Service) nriUpdateContainer(ctx context.Context, id string, res container.Resources) (container.Resources, error) {
	if !s.nriActive() {
		return res, nil
	}
	pod, ctr, ok := s.nriViews(ctx, id)
	if !ok {
		return res, nil
	}
	asked := nriResources(&res)
	got, err := s.nri.UpdateContainer(ctx, pod, ctr, asked)
	if err != nil {
		return res, status.Errorf(codes.Unknown, "NRI: UpdateContainer %s: %v", id, err)
	}
	if got == nil || proto.Equal(got, asked) {
		return res, nil
	}
	set, err := dockerResourcesOf(got)
	if err != nil {
		return res, status.Errorf(codes.InvalidArgument, "NRI: UpdateContainer %s: plugins set %v", id, err)
	}
	res.CPUShares, res.CPUQuota, res.CPUPeriod, res.CpusetCpus, res.CpusetMems = set.CPUShares, set.CPUQuota, set.CPUPeriod, set.CpusetCpus, set.CpusetMems
	res.Memory, res.MemoryReservation, res.MemorySwap, res.PidsLimit = set.Memory, set.MemoryReservation, set.MemorySwap, set.PidsLimit
	return res, nil
}

// nriPostUpdate tells plugins of a container whose resources changed.
func (s *Service) nriPostUpdate(ctx context.Context, id string) {
	if !s.nriActive() {
		return
	}
	if pod, ctr, ok := s.nriViews(ctx, id); ok {
		if err := s.nri.PostUpdateContainer(ctx, pod, ctr); err != nil {
			s.log.WithField("id", id).Warnf("NRI: PostUpdateContainer: %v", err)
		}
	}
}
