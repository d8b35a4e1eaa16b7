package core

import (
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// applySandboxSecurity maps the pod-level security context onto the sandbox container.
func applySandboxSecurity(_ *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxSandboxSecurityContext) error {
	if sc == nil {
		return nil
	}
	hc.ReadonlyRootfs = sc.ReadonlyRootfs
	return nil
}
