package core

import (
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/procuser"
)

// containerUser is ContainerStatus.user: the uid, gid and supplemental groups the container's
// first process has (the kubelet's status.containerStatuses[].user), read from the host's
// /proc while it runs and kept for after. nil when it was never seen running here, or when
// its process is not a host process of the container (gVisor, a VM runtime).
func (s *Service) containerUser(c *container.InspectResponse) *runtimeapi.ContainerUser {
	// Read once: it is who the first process started as, and each PodSandboxStatus asks.
	if _, known := s.users.Get(c.ID); !known && c.State != nil && c.State.Running && c.State.Pid > 0 {
		u, err := procuser.Read(s.stats.Host().Proc(), c.State.Pid, c.ID)
		if err == nil {
			s.users.Put(c.ID, u)
		} else {
			// Trace: a gVisor or VM container's status says so on every call.
			s.log.WithError(err).Tracef("container %s: no user in its status", c.ID)
		}
	}
	u, ok := s.users.Get(c.ID)
	if !ok {
		return nil
	}
	return &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: u.UID, Gid: u.GID, SupplementalGroups: u.Groups}}
}
