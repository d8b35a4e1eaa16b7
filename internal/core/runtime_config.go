package core

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeConfig reports Docker's cgroup driver, so the kubelet can use the same one.
func (s *Service) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return nil, dockerError(err, "docker info")
	}
	driver := runtimeapi.CgroupDriver_CGROUPFS
	if info.CgroupDriver == "systemd" {
		driver = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

// UpdateRuntimeConfig takes the kubelet's pod CIDR for the network plugin (the CNI ipRanges
// capability); Docker's bridge does not use it.
func (s *Service) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr(); cidr != "" {
		s.log.WithField("pod_cidr", cidr).Debug("pod CIDR update")
		if err := s.updatePodCIDR(cidr); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}
