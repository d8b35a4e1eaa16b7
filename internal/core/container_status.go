package core

import (
	"context"
	"encoding/json"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
)

// inspectCRIContainer inspects a container of ours: NotFound when id names nothing, or
// something that is not a CRI container (a sandbox, a container of another tool).
func (s *Service) inspectCRIContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return nil, notFoundf("container %q not found", id)
		}
		return nil, dockerError(err, "inspect container %q", id)
	}
	if !isCRIContainer(c) {
		return nil, notFoundf("container %q not found: it is not a CRI container", id)
	}
	return c, nil
}

// isCRIContainer says whether c is a container (not a sandbox) made through the CRI, by us or
// by upstream cri-dockerd (same type and sandbox labels), whose name we can parse.
func isCRIContainer(c *container.InspectResponse) bool {
	if c.Config == nil || c.Config.Labels[containerTypeLabel] != containerTypeContainer || c.Config.Labels[sandboxIDLabel] == "" {
		return false
	}
	_, err := parseName(c.Name)
	return err == nil
}

// ContainerStatus reports a container from a Docker inspect of it and one of its image.
func (s *Service) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	if s.nriPending.hasPrefix(id) {
		return nil, notFoundf("container %q: not created yet (an NRI plugin's CreateContainer hook is running)", id)
	}
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	name, err := parseName(c.Name)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "container %q: %v", id, err)
	}
	labels, annotations := splitLabels(c.Config.Labels)
	st := &runtimeapi.ContainerStatus{
		Id:          c.ID,
		Metadata:    name.containerMetadata(),
		State:       runtimeapi.ContainerState_CONTAINER_UNKNOWN,
		CreatedAt:   parseDockerTime(c.Created),
		Image:       &runtimeapi.ImageSpec{Image: specifiedImage(c.Config.Image, c.Config.Labels)},
		ImageRef:    s.pullableImageRef(ctx, c.ID, c.Image),
		ImageId:     c.Image,
		Labels:      labels,
		Annotations: annotations,
		Mounts:      imagevolume.CRIMounts(criMounts(c.Mounts), c.Config.Labels),
		LogPath:     logPathOrNone(c.Config.Labels),
		Resources:   statusResources(c.HostConfig),
		StopSignal:  criStopSignal(c.Config.StopSignal),
	}
	if state := c.State; state != nil {
		st.StartedAt = parseDockerTime(state.StartedAt)
		st.FinishedAt = parseDockerTime(state.FinishedAt)
		st.ExitCode = int32(state.ExitCode)
		st.State = containerState(state.Status)
		switch {
		case st.State == runtimeapi.ContainerState_CONTAINER_EXITED && (state.OOMKilled || state.ExitCode == 137 && s.ooms.seen(c.ID)):
			// Docker's oom event stands in for OOMKilled when Docker lost its race (oom.go).
			st.Reason = "OOMKilled"
		case st.State == runtimeapi.ContainerState_CONTAINER_EXITED && state.ExitCode == 0:
			st.Reason = "Completed"
		case st.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			st.Reason = "Error"
		case st.State == runtimeapi.ContainerState_CONTAINER_CREATED && state.Error != "":
			// A start that failed leaves the container created, with Docker's error.
			st.Reason = "ContainerCannotRun"
		}
		st.Message = state.Error
	}
	st.User = s.containerUser(c)
	if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		// The kubelet reads the log once it sees the container exited: let the last lines land.
		drainCtx, cancel := context.WithTimeout(ctx, drainTimeout)
		s.logs.Drained(drainCtx, c.ID)
		cancel()
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.Verbose {
		raw, _ := json.Marshal(c)
		resp.Info = map[string]string{"info": string(raw)}
	}
	return resp, nil
}

// statusResources are the container's resources as Docker holds them (UpdateContainerResources
// changes them there), what containerd reports too. The kubelet reads them for in-place pod
// resize; without them it fills the status from what it asked, and a container with no memory
// request or limit shows memory "0" for both.
func statusResources(hc *container.HostConfig) *runtimeapi.ContainerResources {
	if hc == nil {
		return nil
	}
	return &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		CpuPeriod:              hc.CPUPeriod,
		CpuQuota:               hc.CPUQuota,
		CpuShares:              hc.CPUShares,
		MemoryLimitInBytes:     hc.Memory,
		MemorySwapLimitInBytes: hc.MemorySwap,
		OomScoreAdj:            int64(hc.OomScoreAdj),
		CpusetCpus:             hc.CpusetCpus,
		CpusetMems:             hc.CpusetMems,
	}}
}

// Prefixes of ContainerStatus.image_ref, as upstream cri-dockerd (and dockershim) write them.
const (
	dockerImageIDPrefix         = "docker://"
	dockerPullableImageIDPrefix = "docker-pullable://"
)

// pullableImageRef is the container's image_ref as upstream cri-dockerd reports it: the
// kubelet copies it into the pod's status.containerStatuses[].imageID, which must not change
// when a node swaps binaries. It is the image's first repo digest (docker-pullable://), or its
// ID (docker://sha256:...) when the image has no digest (built, loaded, imported) or is gone.
func (s *Service) pullableImageRef(ctx context.Context, containerID, imageID string) string {
	if imageID == "" {
		return ""
	}
	img, err := s.docker.InspectImage(ctx, imageID)
	if err != nil {
		if !libdocker.IsNotFound(err) {
			// Upstream fails the whole status call here. A kubelet that gets no status cannot
			// see the container's state at all; a status whose imageID lacks the digest for a
			// moment costs less.
			s.log.WithError(err).Debugf("inspect image %s of container %s: reporting image_ref by ID", imageID, containerID)
		}
		return dockerImageIDPrefix + imageID
	}
	if digests := realReferences(img.RepoDigests); len(digests) > 0 {
		return dockerPullableImageIDPrefix + digests[0]
	}
	return dockerImageIDPrefix + imageID
}

// logPathOrNone is the log path the labels give, "" where logPathOf refuses it: the kubelet
// reads the file it names.
func logPathOrNone(labels map[string]string) string {
	path, err := logPathOf(labels)
	if err != nil {
		return ""
	}
	return path
}

// specifiedImage is the image as the user wrote it, when the kubelet passed a resolved ID.
func specifiedImage(configImage string, labels map[string]string) string {
	if user := labels[userImageLabel]; user != "" {
		return user
	}
	return configImage
}

// containerState maps Docker's state names to CRI states.
func containerState(dockerState string) runtimeapi.ContainerState {
	switch dockerState {
	case "created":
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case "running", "paused", "restarting":
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case "exited", "dead":
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

func criMounts(mounts []container.MountPoint) []*runtimeapi.Mount {
	var out []*runtimeapi.Mount
	for _, m := range mounts {
		if m.Type != mount.TypeBind {
			continue
		}
		cm := &runtimeapi.Mount{ContainerPath: m.Destination, HostPath: m.Source, Readonly: !m.RW}
		switch m.Propagation {
		case mount.PropagationRSlave, mount.PropagationSlave:
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		case mount.PropagationRShared, mount.PropagationShared:
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
		}
		out = append(out, cm)
	}
	return out
}
