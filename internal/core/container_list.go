package core

import (
	"context"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainers lists containers from one Docker list call, filtered by id (prefix), pod
// sandbox, state and labels. While the store answers lists, the whole list is built once per
// change and filtered (list_cache.go).
func (s *Service) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	resp, err := s.listContainersKept(ctx, req)
	if err != nil || !s.nriPending.any() {
		return resp, err
	}
	return &runtimeapi.ListContainersResponse{Containers: withoutPending(&s.nriPending, resp.Containers, (*runtimeapi.Container).GetId)}, nil
}

func (s *Service) listContainersKept(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	all, kept, err := keptList(s, &s.containerList, func() (*runtimeapi.ListContainersResponse, error) { return s.listContainers(ctx, nil) })
	if !kept {
		return s.listContainers(ctx, f)
	}
	if err != nil || f == nil || proto.Equal(f, &runtimeapi.ContainerFilter{}) {
		return all, err
	}
	out := make([]*runtimeapi.Container, 0, len(all.Containers))
	for _, c := range all.Containers {
		if containerMatches(c, f) {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

// containerMatches reports whether c passes filter f.
func containerMatches(c *runtimeapi.Container, f *runtimeapi.ContainerFilter) bool {
	return strings.HasPrefix(c.Id, f.GetId()) &&
		(f.GetPodSandboxId() == "" || c.PodSandboxId == f.GetPodSandboxId()) &&
		(f.GetState() == nil || f.GetState().State == c.State) &&
		matchesSelector(c.Labels, f.GetLabelSelector())
}

func (s *Service) listContainers(ctx context.Context, f *runtimeapi.ContainerFilter) (*runtimeapi.ListContainersResponse, error) {
	list, err := s.listCRIContainers(ctx, f.GetId(), f.GetPodSandboxId(), f.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.Container, 0, len(list))
	for _, c := range list {
		labels, annotations := splitLabels(c.Labels)
		// image_ref is the image ID here, not ContainerStatus' docker-pullable:// form (as
		// upstream): the kubelet's image garbage collector compares it with Image.id to know
		// which images are in use.
		ctr := &runtimeapi.Container{
			Id:           c.ID,
			PodSandboxId: c.Labels[sandboxIDLabel],
			Metadata:     c.name.containerMetadata(),
			Image:        &runtimeapi.ImageSpec{Image: specifiedImage(c.Image, c.Labels)},
			ImageRef:     c.ImageID,
			ImageId:      c.ImageID,
			State:        containerState(c.State),
			CreatedAt:    c.Created * int64(time.Second),
			Labels:       labels,
			Annotations:  annotations,
		}
		if f.GetState() != nil && f.GetState().State != ctr.State {
			continue
		}
		if !matchesSelector(labels, f.GetLabelSelector()) {
			continue
		}
		out = append(out, ctr)
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}
