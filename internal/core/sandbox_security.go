package core

import (
	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// applySandboxSecurity maps the pod-level security context onto the sandbox (pause) container:
// its user and groups, read-only root, seccomp, AppArmor and SELinux. privileged says that the
// pod may run privileged containers, not that the pause container needs privileges: as in
// containerd, it stays unprivileged (CreateContainer checks the flag). It runs before anything
// is created, so a refused context leaves nothing behind.
func applySandboxSecurity(cc *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxSandboxSecurityContext) error {
	if sc == nil {
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+profileUnconfined)
		return nil
	}
	if err := checkUserNamespace(sc.GetNamespaceOptions().GetUsernsOptions()); err != nil {
		return err
	}
	if sc.SupplementalGroupsPolicy == runtimeapi.SupplementalGroupsPolicy_Strict {
		return status.Error(codes.Unimplemented, strictGroupsRefusal)
	}
	// A pod may set run_as_group alone (the image's user keeps running): the group then has
	// no user to go with, and Docker cannot take a group without one.
	applyIdentity(cc, hc, sc.RunAsUser, "", sc.RunAsGroup, sc.SupplementalGroups)
	hc.ReadonlyRootfs = sc.ReadonlyRootfs
	seccomp, err := seccompSecurityOpt(sc.Seccomp, sc.SeccompProfilePath)
	if err != nil {
		return err
	}
	if seccomp != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, seccomp)
	}
	apparmor, err := apparmorSecurityOpt(sc.Apparmor, "")
	if err != nil {
		return err
	}
	if apparmor != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, apparmor)
	}
	hc.SecurityOpt = append(hc.SecurityOpt, selinuxSecurityOpts(sc.SelinuxOptions)...)
	return nil
}
