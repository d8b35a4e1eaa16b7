package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// DockerLimits (what doctor and the README say) quotes the errors pods really get.
func TestDockerLimitsQuoteTheErrorsPodsGet(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	outcome := map[string]string{}
	for _, l := range DockerLimits() {
		if l.Feature == "" || l.Outcome == "" {
			t.Errorf("limit %+v", l)
		}
		outcome[l.Feature] = l.Outcome
	}
	userns := sandboxConfig("userns")
	userns.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD},
	}}}
	_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: userns})
	wantQuoted(t, outcome["user namespaces per pod (hostUsers: false)"], err)

	strict := sandboxConfig("strict")
	strict.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict}}
	_, err = s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: strict})
	wantQuoted(t, outcome["supplementalGroupsPolicy: Strict"], err)

	_, err = createWith(t, s, fake, func(cfg *runtimeapi.ContainerConfig) {
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: "/x", ContainerPath: "/x", MountOptions: []string{"noexec"}}}
	})
	msg := status.Convert(err).Message()
	if want := outcome["mount options (noexec, nodev, nosuid)"]; err == nil || !strings.Contains(want, msg[strings.Index(msg, "mount option "):]) {
		t.Errorf("mount options: the error %q is not what DockerLimits says: %q", msg, want)
	}
}

// wantQuoted checks that outcome ends with err's code and message, as a pod's event shows them.
func wantQuoted(t *testing.T, outcome string, err error) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || !strings.HasSuffix(outcome, st.Code().String()+": "+st.Message()) {
		t.Errorf("the error %v is not what DockerLimits says: %q", err, outcome)
	}
}
