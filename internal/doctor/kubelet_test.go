package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubeletChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path string
		want       Status
		detail     string
	}{
		{"kubeadm's defaults", write("off.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"), Warn, "featureGates.PodAndContainerStatsFromCRI off"},
		{"gate false", write("false.yaml", "kind: KubeletConfiguration\nfeatureGates:\n  PodAndContainerStatsFromCRI: false\n"), Warn, "no pod or container labels"},
		{"gate on", write("on.yaml", "kind: KubeletConfiguration\nfeatureGates:\n  PodAndContainerStatsFromCRI: true\n  EventedPLEG: true\n"), OK, "on"},
		{"not a kubelet config", write("other.yaml", "kind: Pod\n"), Warn, "not a KubeletConfiguration"},
		{"missing, named", filepath.Join(dir, "none.yaml"), Warn, "cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := KubeletChecks(tc.path)
			if len(checks) != 1 || checks[0].Status != tc.want || !strings.Contains(checks[0].Detail, tc.detail) {
				t.Errorf("KubeletChecks(%s) = %+v, want %s with %q", tc.path, checks, tc.want, tc.detail)
			}
		})
	}
}

func TestLimitChecksAreInfoLines(t *testing.T) {
	checks := LimitChecks()
	if len(checks) < 4 {
		t.Fatalf("%d limit lines, want one per limit", len(checks))
	}
	for _, c := range checks {
		if c.Status != Info || !strings.Contains(c.Detail, ": ") {
			t.Errorf("limit line %+v", c)
		}
	}
	if Failed(checks) {
		t.Error("limit lines fail the doctor")
	}
}
