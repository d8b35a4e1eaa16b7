//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNumberedLinesSurviveDockersLogRotation: with --docker-log-max-size=2k Docker keeps its
// own copy of the log in 5 files of 2 kB and rotates them many times while a container writes
// bursts of numbered lines (one burst while cri-dockerd is stopped, one across a restart);
// every number reaches the CRI log exactly once, in order. Docker's followed stream skips
// lines at its rotations (docker logs -f alike): the follower reads them again.
func TestNumberedLinesSurviveDockersLogRotation(t *testing.T) {
	d := StartDaemon(t, "--docker-log-max-size=2k", "--docker-log-max-file=5")
	podCfg := newPodConfig(t, "dockerrot")
	sandboxID := runPod(t, d, podCfg, "")
	ctl := t.TempDir()
	const bursts, per = 6, 40
	// A burst of 40 lines (about 3 kB of Docker's json) waits for its go file: Docker then
	// has two bursts (5 files of 2 kB) even while cri-dockerd is down.
	cfg := containerConfig("counter", fmt.Sprintf(
		`i=0; b=0; while [ $b -lt %d ]; do while [ ! -e /ctl/go$b ]; do sleep 0.05; done; j=0; while [ $j -lt %d ]; do i=$((i+1)); j=$((j+1)); echo n=$i; done; b=$((b+1)); done`, bursts, per))
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: ctl, ContainerPath: "/ctl"}}
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, ctrID)

	inspect, err := suite.docker.ContainerInspect(t.Context(), ctrID)
	if err != nil {
		t.Fatal(err)
	}
	if lc := inspect.HostConfig.LogConfig; lc.Type != "json-file" || lc.Config["max-size"] != "2k" || lc.Config["max-file"] != "5" {
		t.Fatalf("Docker's log config %s %v, want json-file with max-size 2k, max-file 5", lc.Type, lc.Config)
	}
	path := filepath.Join(podCfg.LogDirectory, "counter.log")
	burst := func(b int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ctl, "go"+strconv.Itoa(b)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inDocker := func(n int) func() bool { return func() bool { return dockerLastNumber(t, ctrID) >= n } }

	// Each burst waits until Docker has it (not our file: Docker's followed stream may skip
	// lines across its rotation, and the check below says which).
	burst(0)
	waitFor(t, "burst 0 in Docker's log", inDocker(per))
	burst(1)
	waitFor(t, "burst 1 in Docker's log", inDocker(2*per))
	d.Stop()
	burst(2)
	waitFor(t, "burst 2 in Docker's log", inDocker(3*per))
	d.Start()
	burst(3)
	d.Restart()
	waitFor(t, "burst 3 in Docker's log", inDocker(4*per))
	burst(4)
	burst(5)
	waitExited(t, d, ctrID)
	var got []string
	for _, l := range readCRILog(t, path) {
		got = append(got, strings.TrimPrefix(l.content, "n="))
	}
	var want []string
	for i := 1; i <= bursts*per; i++ {
		want = append(want, strconv.Itoa(i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the CRI log holds %d lines, want n=1..%d once each, in order; it holds: %s", len(got), bursts*per, strings.Join(got, " "))
	}
	// Docker rotated its files: it keeps fewer lines than were written.
	if _, err := os.Stat(inspect.LogPath + ".1"); err != nil {
		t.Errorf("Docker's log %s was not rotated: %v", inspect.LogPath, err)
	}
}
