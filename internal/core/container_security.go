package core

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Security profile names of the deprecated string fields (seccomp_profile_path, apparmor_profile).
const (
	profileRuntimeDefault = "runtime/default"
	profileDockerDefault  = "docker/default"
	profileUnconfined     = "unconfined"
	profileLocalhost      = "localhost/"
)

// maxSeccompProfileSize bounds a localhost seccomp profile; Docker holds it in the container's
// configuration, and real profiles are a few kilobytes.
const maxSeccompProfileSize = 1 << 20

// applySecurityContext maps a container's security context onto Docker's configuration. What
// Docker cannot do (ambient capabilities, per-pod user namespaces, the Strict supplemental
// groups policy, AppArmor profiles on a node without AppArmor) is refused, not ignored.
// A privileged container needs a pod whose sandbox says it may run one.
func (s *Service) applySecurityContext(ctx context.Context, cc *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxContainerSecurityContext, sandboxPrivileged bool, rt podRuntime) error {
	if sc == nil {
		// No security context: no seccomp filter either, as for a nil profile.
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+profileUnconfined)
		return nil
	}
	applyIdentity(cc, hc, sc.RunAsUser, sc.RunAsUsername, sc.RunAsGroup, sc.SupplementalGroups)
	if runtimeapi.SupplementalGroupsPolicy_name[int32(sc.SupplementalGroupsPolicy)] == "" {
		return invalidf("container supplemental_groups_policy: unknown policy %d (want Merge or Strict)", sc.SupplementalGroupsPolicy)
	}
	if sc.SupplementalGroupsPolicy == runtimeapi.SupplementalGroupsPolicy_Strict {
		return status.Error(codes.Unimplemented, strictGroupsRefusal)
	}
	if err := checkUserNamespace(sc.GetNamespaceOptions().GetUsernsOptions()); err != nil {
		return err
	}
	if sc.Privileged && !sandboxPrivileged {
		return invalidf("privileged container in a pod sandbox that is not privileged: the pod's security context must say privileged")
	}
	hc.Privileged = sc.Privileged
	hc.ReadonlyRootfs = sc.ReadonlyRootfs
	if caps := sc.Capabilities; caps != nil {
		if len(caps.AddAmbientCapabilities) > 0 {
			return status.Errorf(codes.Unimplemented, "ambient capabilities %v: Docker cannot set ambient capabilities", caps.AddAmbientCapabilities)
		}
		hc.CapAdd = strslice.StrSlice(normalizeCapabilities(caps.AddCapabilities))
		hc.CapDrop = strslice.StrSlice(normalizeCapabilities(caps.DropCapabilities))
	}
	if sc.NoNewPrivs {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	// A privileged container runs without a seccomp filter, whatever profile it names, as in
	// containerd (critest: "runtime should ignore a seccomp profile ... when privileged").
	// Docker 20.10 ignored the profile of a privileged container; Docker 28+ applies it.
	seccomp := "seccomp=" + profileUnconfined
	if !sc.Privileged {
		var err error
		if seccomp, err = seccompSecurityOpt(sc.Seccomp, sc.SeccompProfilePath); err != nil {
			return err
		}
	}
	if seccomp != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, seccomp)
	}
	apparmor, err := apparmorSecurityOpt(sc.Apparmor, sc.ApparmorProfile)
	if err != nil {
		return err
	}
	if apparmor != "" && apparmor != "apparmor="+profileUnconfined {
		// A named profile on a node without AppArmor would leave the container unconfined
		// without a word: Docker ignores the option there.
		name := strings.TrimPrefix(apparmor, "apparmor=")
		enabled, known := s.apparmorEnabled(ctx)
		if known && !enabled {
			return status.Errorf(codes.FailedPrecondition, "AppArmor profile %q requested, but AppArmor is not enabled on this node (Docker reports no apparmor security option)", name)
		}
		// runc would fail the start with "apparmor failed to apply profile: ... no such file
		// or directory", which does not say that the profile is not loaded.
		if loaded, listed := s.apparmorLoaded(name); enabled && listed && !loaded {
			return status.Errorf(codes.FailedPrecondition, "AppArmor profile %q is not loaded on this node (%s does not list it): load it with apparmor_parser before the pod starts", name, s.apparmorProfiles())
		}
	}
	if apparmor != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, apparmor)
	}
	hc.SecurityOpt = append(hc.SecurityOpt, selinuxSecurityOpts(sc.SelinuxOptions)...)
	// The kubelet sends the default masked and read-only paths unless the pod asks for an
	// unmasked /proc; an empty list cannot be told from an absent one in CRI, so it keeps
	// Docker's own defaults (which are the same paths) rather than unmasking /proc.
	if !sc.Privileged {
		if len(sc.MaskedPaths) > 0 {
			hc.MaskedPaths = append([]string(nil), sc.MaskedPaths...)
		}
		if len(sc.ReadonlyPaths) > 0 {
			hc.ReadonlyPaths = append([]string(nil), sc.ReadonlyPaths...)
		}
	}
	if sc.Privileged && s.withoutHostDevices(rt) {
		grantPrivilegesWithoutHostDevices(hc)
	}
	return nil
}

// withoutHostDevices reports whether privileged containers of pods on rt must not get the
// node's devices (--privileged-without-host-devices).
func (s *Service) withoutHostDevices(rt podRuntime) bool {
	handler := rt.Handler
	if handler == "" {
		handler = s.opts.DefaultRuntimeHandler
	}
	return s.opts.PrivilegedWithoutHostDevices[handler]
}

// grantPrivilegesWithoutHostDevices gives a container what Docker's privileged mode gives
// except the node's devices, which Docker cannot leave out of that mode: every capability,
// no seccomp filter, no AppArmor or SELinux confinement, and an unmasked /proc. Only the
// devices the container asks for are mapped; /sys and the cgroup filesystem stay read-only,
// as Docker mounts them for every unprivileged container.
func grantPrivilegesWithoutHostDevices(hc *container.HostConfig) {
	hc.Privileged = false
	hc.CapAdd = strslice.StrSlice{"ALL"}
	hc.CapDrop = nil
	kept := hc.SecurityOpt[:0]
	for _, opt := range hc.SecurityOpt {
		if strings.HasPrefix(opt, "seccomp=") || strings.HasPrefix(opt, "apparmor=") || strings.HasPrefix(opt, "label=") {
			continue
		}
		kept = append(kept, opt)
	}
	hc.SecurityOpt = append(kept, "seccomp="+profileUnconfined, "apparmor="+profileUnconfined, "label=disable")
	// Empty lists, not nil: nil keeps Docker's default masks.
	hc.MaskedPaths = []string{}
	hc.ReadonlyPaths = []string{}
}

// applyIdentity sets the user, group and supplemental groups of the first process.
func applyIdentity(cc *container.Config, hc *container.HostConfig, uid *runtimeapi.Int64Value, username string, gid *runtimeapi.Int64Value, groups []int64) {
	switch {
	case uid != nil:
		cc.User = strconv.FormatInt(uid.Value, 10)
	case username != "":
		cc.User = username
	}
	if gid != nil && cc.User != "" {
		cc.User += ":" + strconv.FormatInt(gid.Value, 10)
	}
	for _, g := range groups {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
	}
}

// normalizeCapabilities accepts the names the kubelet passes ("NET_ADMIN", "CAP_NET_ADMIN",
// "ALL") in any case and gives them in the form Docker documents.
func normalizeCapabilities(caps []string) []string {
	if len(caps) == 0 {
		return nil
	}
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		c = strings.ToUpper(strings.TrimSpace(c))
		if c == "" {
			continue
		}
		if c != "ALL" && !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}

// checkUserNamespace refuses user namespace modes Docker cannot give a single pod: Docker maps
// user namespaces for the whole daemon (userns-remap) or not at all.
func checkUserNamespace(u *runtimeapi.UserNamespace) error {
	if u == nil || u.Mode == runtimeapi.NamespaceMode_NODE {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "user namespace mode %s: %s", u.Mode, userNamespaceRefusal)
}

// seccompSecurityOpt is Docker's security option for a seccomp profile: "" keeps Docker's
// default filter, "seccomp=unconfined" turns it off, and a localhost profile is passed as its
// JSON, as the docker CLI does. A nil profile with an empty legacy path is unconfined, as CRI
// defines it; the legacy path is read only when the profile is nil.
func seccompSecurityOpt(p *runtimeapi.SecurityProfile, legacy string) (string, error) {
	var path string
	if p != nil {
		switch p.ProfileType {
		case runtimeapi.SecurityProfile_RuntimeDefault:
			return "", nil
		case runtimeapi.SecurityProfile_Unconfined:
			return "seccomp=" + profileUnconfined, nil
		case runtimeapi.SecurityProfile_Localhost:
			path = p.LocalhostRef
		default:
			return "", invalidf("seccomp profile type %d is not known", p.ProfileType)
		}
	} else {
		switch {
		case legacy == "" || legacy == profileUnconfined:
			return "seccomp=" + profileUnconfined, nil
		case legacy == profileRuntimeDefault || legacy == profileDockerDefault:
			return "", nil
		case strings.HasPrefix(legacy, profileLocalhost):
			path = strings.TrimPrefix(legacy, profileLocalhost)
		default:
			return "", invalidf("seccomp profile %q: want %q, %q or %q<path>", legacy, profileRuntimeDefault, profileUnconfined, profileLocalhost)
		}
	}
	if path == "" || !filepath.IsAbs(path) {
		return "", invalidf("localhost seccomp profile %q: an absolute path to a profile file on the node is required", path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", invalidf("localhost seccomp profile: %v", err)
	}
	if !info.Mode().IsRegular() || info.Size() > maxSeccompProfileSize {
		return "", invalidf("localhost seccomp profile %q: not a regular file of at most %d bytes", path, maxSeccompProfileSize)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", invalidf("localhost seccomp profile: %v", err)
	}
	var profile map[string]any
	if err := json.Unmarshal(raw, &profile); err != nil {
		return "", invalidf("localhost seccomp profile %q is not a JSON object: %v", path, err)
	}
	compact, err := json.Marshal(profile)
	if err != nil {
		return "", invalidf("localhost seccomp profile %q: %v", path, err)
	}
	return "seccomp=" + string(compact), nil
}

// apparmorSecurityOpt is Docker's security option for an AppArmor profile: "" keeps Docker's
// default (docker-default where AppArmor is enabled).
func apparmorSecurityOpt(p *runtimeapi.SecurityProfile, legacy string) (string, error) {
	var name string
	if p != nil {
		switch p.ProfileType {
		case runtimeapi.SecurityProfile_RuntimeDefault:
			return "", nil
		case runtimeapi.SecurityProfile_Unconfined:
			return "apparmor=" + profileUnconfined, nil
		case runtimeapi.SecurityProfile_Localhost:
			name = p.LocalhostRef
		default:
			return "", invalidf("AppArmor profile type %d is not known", p.ProfileType)
		}
	} else {
		switch {
		case legacy == "" || legacy == profileRuntimeDefault:
			return "", nil
		case legacy == profileUnconfined:
			return "apparmor=" + profileUnconfined, nil
		case strings.HasPrefix(legacy, profileLocalhost):
			name = strings.TrimPrefix(legacy, profileLocalhost)
		default:
			return "", invalidf("AppArmor profile %q: want %q, %q or %q<name>", legacy, profileRuntimeDefault, profileUnconfined, profileLocalhost)
		}
	}
	name = strings.TrimPrefix(name, profileLocalhost)
	if name == "" || strings.ContainsAny(name, "\n\x00") {
		return "", invalidf("localhost AppArmor profile %q: a profile name is required", name)
	}
	return "apparmor=" + name, nil
}

// selinuxSecurityOpts turns SELinux options into Docker's label options.
func selinuxSecurityOpts(o *runtimeapi.SELinuxOption) []string {
	if o == nil {
		return nil
	}
	var out []string
	for _, kv := range [][2]string{{"user", o.User}, {"role", o.Role}, {"type", o.Type}, {"level", o.Level}} {
		if kv[1] != "" {
			out = append(out, "label="+kv[0]+":"+kv[1])
		}
	}
	return out
}

// apparmorEnabled tells from Docker's cached /info whether the daemon confines containers with
// AppArmor; known is false when Docker could not be asked.
func (s *Service) apparmorEnabled(ctx context.Context) (enabled, known bool) {
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return false, false
	}
	for _, opt := range info.SecurityOptions {
		if opt == "apparmor" || strings.HasPrefix(opt, "name=apparmor") {
			return true, true
		}
	}
	return false, true
}

// apparmorProfiles is the kernel's list of loaded AppArmor profiles, one "NAME (MODE)" a line.
func (s *Service) apparmorProfiles() string {
	return filepath.Join(s.stats.Host().Sys(), "kernel", "security", "apparmor", "profiles")
}

// apparmorLoaded tells whether the kernel has profile name loaded; listed is false when its
// list cannot be read (securityfs not mounted, or not root), and then nothing is known.
func (s *Service) apparmorLoaded(name string) (loaded, listed bool) {
	raw, err := os.ReadFile(s.apparmorProfiles())
	if err != nil {
		return false, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if i := strings.LastIndex(line, " ("); i > 0 && line[:i] == name {
			return true, true
		}
	}
	return false, true
}

// applyNamespaces puts a container into its pod's namespaces: network and IPC of the sandbox
// (the node's, for a pod created with them), and the PID namespace its own security context
// asks for: the sandbox's (POD), the node's (NODE, in a pod created with host PID; else the
// sandbox's, as containerd joins the sandbox's for every mode but CONTAINER), a running
// container's of the same pod (TARGET) or its own (CONTAINER).
func (s *Service) applyNamespaces(ctx context.Context, hc *container.HostConfig, sandboxID string, pod podSettings, containerNS *runtimeapi.NamespaceOption) error {
	if err := checkNamespaceModes("container", containerNS); err != nil {
		return err
	}
	hc.NetworkMode = container.NetworkMode("container:" + sandboxID)
	hc.IpcMode = container.IpcMode("container:" + sandboxID)
	if pod.hostNetwork {
		hc.NetworkMode = "host"
	}
	if pod.hostIPC {
		hc.IpcMode = "host"
	}
	switch containerNS.GetPid() {
	case runtimeapi.NamespaceMode_POD:
		hc.PidMode = container.PidMode("container:" + sandboxID)
	case runtimeapi.NamespaceMode_NODE:
		hc.PidMode = container.PidMode("container:" + sandboxID)
		if pod.hostPID {
			hc.PidMode = "host"
		}
	case runtimeapi.NamespaceMode_TARGET:
		target, err := s.pidTarget(ctx, sandboxID, containerNS.GetTargetId())
		if err != nil {
			return err
		}
		hc.PidMode = container.PidMode("container:" + target)
	}
	return nil
}

// pidTarget is the ID of the container whose PID namespace a TARGET mode names. As in
// containerd, it must be a running container of the same pod: a pod cannot join (and see the
// processes of) another pod's container.
func (s *Service) pidTarget(ctx context.Context, sandboxID, target string) (string, error) {
	if target == "" {
		return "", invalidf("pid namespace mode TARGET needs target_id")
	}
	c, err := s.docker.InspectContainer(ctx, target)
	if err != nil {
		if libdocker.IsNotFound(err) {
			return "", notFoundf("pid namespace target container %q not found", target)
		}
		return "", dockerError(err, "inspect pid namespace target %q", target)
	}
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if labels[containerTypeLabel] != containerTypeContainer || labels[sandboxIDLabel] != sandboxID {
		return "", invalidf("pid namespace target %q is not a container of pod sandbox %q", target, sandboxID)
	}
	if c.State == nil || !c.State.Running {
		return "", status.Errorf(codes.FailedPrecondition, "pid namespace target container %q is not running", target)
	}
	return c.ID, nil
}
