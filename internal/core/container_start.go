package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/core/startgate"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// StartContainer starts a created container. When the pod's runtime cannot run it, the error
// names the handler and what is wrong with the runtime.
func (s *Service) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	// One inspect tells a CRI container from anything else and gives what the log follower
	// needs: the full ID and the labels.
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.imageVolumes.EnsureMounted(ctx, c.ID); err != nil {
		return nil, err
	}
	if err := s.nriStartContainer(ctx, c.ID, false); err != nil {
		return nil, err
	}
	err = s.startContainer(ctx, c.ID, startgate.Container)
	if err == nil {
		s.followLog(c.ID, c.Config.Labels)
		if err := s.startCgroupV2Label(ctx, c.ID, c.Config.Labels); err != nil {
			return nil, err
		}
		_ = s.nriStartContainer(ctx, c.ID, true)
		return &runtimeapi.StartContainerResponse{}, nil
	}
	if serr := s.imageVolumes.SubPathStartError(c.ID, err); serr != nil {
		return nil, serr
	}
	if libdocker.IsNotFound(err) && !errors.Is(err, libdocker.ErrRuntimeFailed) {
		return nil, notFoundf("container %q not found", id)
	}
	s.reclaimFailedStart(ctx, c.ID, err)
	// Only a failure costs a lookup of the pod's runtime, for the error message.
	rt := podRuntime{}
	if _, srt, found, _ := s.sandboxes.lookup(ctx, s.docker, c.Config.Labels[sandboxIDLabel]); found {
		rt = srt
	}
	return nil, s.runtimeFailure(ctx, err, fmt.Sprintf("start container %q", id), rt)
}

// startWaitBound is how long a start waits for a slot of the start gate before it goes in
// without one (a runtime whose starts hang holds the slots).
const startWaitBound = time.Minute

// startContainer asks Docker to start container id once the start gate admits it.
func (s *Service) startContainer(ctx context.Context, id string, p startgate.Priority) error {
	leave, err := s.starts.Enter(ctx, p)
	if err != nil {
		return err
	}
	defer leave()
	return s.docker.StartContainer(ctx, id)
}
