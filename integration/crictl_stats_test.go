//go:build integration

package integration

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCrictlStatsTableForm runs `crictl stats` and `crictl statsp` as a node admin does, in
// table form: crictl takes two samples a second (or -s seconds) apart and refuses to print when
// the second one carries the first one's CPU timestamp ("cpu stat is not updated during
// sample"). Before, both came from the same cached sample, so the commands always failed.
func TestCrictlStatsTableForm(t *testing.T) {
	crictl := crictlBinary(t)
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "crictl-stats")
	sandboxID := runPod(t, d, podCfg, "")
	// Busy a tenth of the time, so that the CPU column has something to show.
	cfg := containerConfig("busy", `trap "exit 0" TERM; while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.1; done`)
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)

	// The kubelet has polled: the cache holds samples that a caller has already seen.
	if _, err := d.Runtime.ListPodSandboxStats(t.Context(), &runtimeapi.ListPodSandboxStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.ListContainerStats(t.Context(), &runtimeapi.ListContainerStatsRequest{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		// the row to find: a cell that names it, and the column of the CPU %
		key    string
		cpuCol int
	}{
		{[]string{"stats", "--pod", sandboxID}, ctrID[:13], 2},
		{[]string{"stats", "--id", ctrID, "-s", "2"}, ctrID[:13], 2},
		{[]string{"statsp", "--id", sandboxID}, sandboxID[:13], 2},
		{[]string{"statsp", "--label", "crid-it-pod=" + podCfg.Labels["crid-it-pod"]}, sandboxID[:13], 2},
	} {
		name := strings.Join(tc.args, " ")
		out, err := exec.CommandContext(t.Context(), crictl, append([]string{"--runtime-endpoint", "unix://" + d.Socket, "--timeout", "30s"}, tc.args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("crictl %s: %v\n%s", name, err, out)
			continue
		}
		t.Logf("crictl %s:\n%s", name, out)
		var row []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > tc.cpuCol && (f[0] == tc.key || f[1] == tc.key) {
				row = f
			}
		}
		if row == nil {
			t.Errorf("crictl %s: no row for %s:\n%s", name, tc.key, out)
			continue
		}
		cpu, err := strconv.ParseFloat(row[tc.cpuCol], 64)
		if err != nil || cpu <= 0 || cpu > float64(100*runtime.NumCPU()) {
			t.Errorf("crictl %s: CPU %% %q, want a share of the node's cores above 0:\n%s", name, row[tc.cpuCol], out)
		}
	}
}
