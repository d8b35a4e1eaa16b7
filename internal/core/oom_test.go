package core

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"
)

// Negative oom_score_adj values are refused on a rootless Docker, and where this process's
// capability bounding set lacks CAP_SYS_RESOURCE; allowed otherwise.
func TestNegativeOOMScoreRefusal(t *testing.T) {
	if got := NegativeOOMScoreRefusal(system.Info{SecurityOptions: []string{"name=seccomp,profile=builtin", "name=rootless"}}); got != "Docker runs rootless" {
		t.Errorf("rootless: %q", got)
	}
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	var bnd uint64
	for sc := bufio.NewScanner(strings.NewReader(string(raw))); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			bnd, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	want := ""
	if bnd&(1<<capSysResource) == 0 {
		want = "this node's capability bounding set lacks CAP_SYS_RESOURCE"
	}
	if got := NegativeOOMScoreRefusal(system.Info{SecurityOptions: []string{"name=seccomp,profile=builtin"}}); got != want {
		t.Errorf("CapBnd %x: refusal %q, want %q", bnd, got, want)
	}
}
