package core

import "testing"

// The standby gate answers VersionAnswer(UnknownDockerVersion) before Docker is reached. The
// kubelet's CRI client (k8s.io/cri-client) and crictl refuse a VersionResponse with an empty
// field ("not all fields are set in VersionResponse"), and the kubelet refuses any Version but
// 0.1.0 at its start.
func TestVersionAnswerWithoutDockerSetsEveryField(t *testing.T) {
	v := VersionAnswer(UnknownDockerVersion)
	if v.Version != "0.1.0" || v.RuntimeName != "docker" || v.RuntimeVersion != "unknown" || v.RuntimeApiVersion != CRIAPIVersion {
		t.Errorf("VersionAnswer(UnknownDockerVersion) = %v; want 0.1.0, docker, unknown, %s", v, CRIAPIVersion)
	}
	if v := VersionAnswer("29.8.0"); v.RuntimeVersion != "29.8.0" {
		t.Errorf("VersionAnswer(29.8.0).RuntimeVersion = %q", v.RuntimeVersion)
	}
}
