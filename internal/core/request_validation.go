package core

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxHostnameLen is Linux's limit (HOST_NAME_MAX is 64); the kubelet sends a DNS label, or the
// pod's FQDN with setHostnameAsFQDN, which it also keeps within 64.
const maxHostnameLen = 64

// validateSandboxSettings checks what a sandbox config sets beyond its names: the hostname, the
// namespace modes, the supplemental groups policy, the port mappings' protocols and the /dev/shm
// size. RunPodSandbox runs it before anything is made, and CreateContainer on the sandbox_config
// it gets.
func validateSandboxSettings(cfg *runtimeapi.PodSandboxConfig) error {
	if h := cfg.GetHostname(); h != "" {
		if len(h) > maxHostnameLen {
			return invalidf("pod sandbox hostname %.80q: %d bytes, Linux allows at most %d", h, len(h), maxHostnameLen)
		}
		// One trailing dot is the FQDN of setHostnameAsFQDN from a kubelet whose clusterDomain is
		// empty ("pod.sub.ns.svc."); Linux and Docker take it as it is, as containerd passes it.
		if errs := validation.IsDNS1123Subdomain(strings.TrimSuffix(h, ".")); len(errs) > 0 {
			return invalidf("pod sandbox hostname %q: not an RFC 1123 name (lower-case letters, digits, '-' and '.'): %s", h, strings.Join(errs, "; "))
		}
	}
	if err := checkNamespaceModes("pod sandbox", cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); err != nil {
		return err
	}
	if p := cfg.GetLinux().GetSecurityContext().GetSupplementalGroupsPolicy(); runtimeapi.SupplementalGroupsPolicy_name[int32(p)] == "" {
		return invalidf("pod sandbox supplemental_groups_policy: unknown policy %d (want Merge or Strict)", p)
	}
	for _, pm := range cfg.GetPortMappings() {
		if _, known := runtimeapi.Protocol_name[int32(pm.GetProtocol())]; !known {
			return invalidf("pod sandbox port mapping %d->%d: unknown protocol %d (want TCP, UDP or SCTP)", pm.GetHostPort(), pm.GetContainerPort(), pm.GetProtocol())
		}
	}
	_, err := sandboxShmSize(cfg)
	return err
}

// checkNamespaceModes refuses a namespace mode the CRI does not define: a mode we do not know
// would silently mean "the default" in every switch that reads it.
func checkNamespaceModes(what string, ns *runtimeapi.NamespaceOption) error {
	for _, m := range []struct {
		field string
		mode  runtimeapi.NamespaceMode
	}{
		{"network", ns.GetNetwork()}, {"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}, {"userns_options.mode", ns.GetUsernsOptions().GetMode()},
	} {
		if _, known := runtimeapi.NamespaceMode_name[int32(m.mode)]; !known {
			return invalidf("%s namespace_options.%s: unknown namespace mode %d (want POD, CONTAINER, NODE or TARGET)", what, m.field, m.mode)
		}
	}
	return nil
}

// checkMountPropagation refuses a propagation the CRI does not define (it would become private).
func checkMountPropagation(m *runtimeapi.Mount) error {
	if _, known := runtimeapi.MountPropagation_name[int32(m.GetPropagation())]; !known {
		return invalidf("mount %q: unknown propagation %d (want PROPAGATION_PRIVATE, PROPAGATION_HOST_TO_CONTAINER or PROPAGATION_BIDIRECTIONAL)", m.GetContainerPath(), m.GetPropagation())
	}
	return nil
}

// nodeMemory is the node's RAM plus swap in bytes, 0 when unknown.
func nodeMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram+si.Totalswap) * int64(si.Unit)
}

// lookupSandboxFor is the sandbox lookup of CreateContainer: it also refuses a sandbox_config
// whose metadata is not the sandbox's, for the container's name, labels and log directory are
// made from it and would claim another pod. The sandbox's record is in memory (RunPodSandbox and
// the index keep it); Docker is asked, with one list, only when it is not.
func (s *Service) lookupSandboxFor(ctx context.Context, id string, sandboxCfg *runtimeapi.PodSandboxConfig) (string, podRuntime, bool, error) {
	sandboxID, rt, found, err := s.sandboxes.lookup(ctx, s.docker, id)
	if err != nil || !found {
		return sandboxID, rt, found, err
	}
	rec, ok := s.sandboxes.record(sandboxID)
	if !ok {
		args := filters.NewArgs(filters.Arg("label", containerTypeLabel+"="+containerTypeSandbox), filters.Arg("id", sandboxID))
		list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: args})
		if err != nil {
			return "", podRuntime{}, false, err
		}
		if len(list) == 1 {
			rec, ok = recordFromSummary(list[0])
		}
	}
	if !ok || rec.metadata == nil {
		return sandboxID, rt, found, nil // nothing to compare with: the name check still applies
	}
	got, want := sandboxCfg.GetMetadata(), rec.metadata
	if got.GetName() != want.GetName() || got.GetNamespace() != want.GetNamespace() || got.GetUid() != want.GetUid() {
		return "", podRuntime{}, false, invalidf("sandbox_config metadata %s does not match pod sandbox %q (%s)",
			describeSandboxMetadata(got), id, describeSandboxMetadata(want))
	}
	return sandboxID, rt, found, nil
}

func describeSandboxMetadata(m *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("name %q, namespace %q, uid %q", m.GetName(), m.GetNamespace(), m.GetUid())
}
