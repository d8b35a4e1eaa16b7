package core

import (
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// applyResources maps a container's Linux resources onto Docker's.
func (s *Service) applyResources(hc *container.HostConfig, r *runtimeapi.LinuxContainerResources) {
	if r == nil {
		return
	}
	hc.CPUPeriod = r.CpuPeriod
	hc.CPUQuota = r.CpuQuota
	hc.CPUShares = r.CpuShares
	hc.Memory = r.MemoryLimitInBytes
	hc.CpusetCpus = r.CpusetCpus
	hc.CpusetMems = r.CpusetMems
	hc.OomScoreAdj = s.oomScoreAdj(r.OomScoreAdj)
}
