package core

import (
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// applySecurityContext maps the parts of a container's security context that every Docker
// version honours the same way.
func applySecurityContext(cc *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxContainerSecurityContext) error {
	if sc == nil {
		return nil
	}
	switch {
	case sc.RunAsUser != nil:
		cc.User = strconv.FormatInt(sc.RunAsUser.Value, 10)
	case sc.RunAsUsername != "":
		cc.User = sc.RunAsUsername
	}
	if sc.RunAsGroup != nil && cc.User != "" {
		cc.User += ":" + strconv.FormatInt(sc.RunAsGroup.Value, 10)
	}
	for _, g := range sc.SupplementalGroups {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
	}
	hc.Privileged = sc.Privileged
	hc.ReadonlyRootfs = sc.ReadonlyRootfs
	if caps := sc.Capabilities; caps != nil {
		hc.CapAdd = strslice.StrSlice(caps.AddCapabilities)
		hc.CapDrop = strslice.StrSlice(caps.DropCapabilities)
	}
	if sc.NoNewPrivs {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	return nil
}
