//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestDoctorOnThisNode runs `cri-dockerd doctor` against the real dockerd, whose test runtimes
// include a good one (wrapped) and a broken one (its path is a directory).
func TestDoctorOnThisNode(t *testing.T) {
	d := StartDaemon(t)
	args := []string{"doctor",
		"--docker-endpoint", suite.docker.DaemonHost(),
		"--container-runtime-endpoint", "unix://" + d.Socket,
		"--runtime-handler", "alt=runc-alt", "--runtime-handler", "nope=no-such-runtime"}
	text, err := exec.Command(suite.binary, args...).CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Errorf("doctor exited with %v, want 1 (a broken runtime is a failure); output:\n%s", err, text)
	}
	jsonOut, _ := exec.Command(suite.binary, append(args, "--output", "json")...).Output()
	var checks []struct{ Name, Status, Detail string }
	if err := json.Unmarshal(jsonOut, &checks); err != nil {
		t.Fatalf("doctor --output json: %v\n%s", err, jsonOut)
	}
	if n := strings.Count(strings.TrimSpace(string(text)), "\n") + 1; n != len(checks) {
		t.Errorf("text output has %d lines for %d checks:\n%s", n, len(checks), text)
	}
	byName := map[string]struct{ Name, Status, Detail string }{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	for name, want := range map[string]string{
		"runtime broken":  "fail",
		"runtime wrapped": "ok",
		"runtime runc":    "ok",
		"handler alt":     "ok",
		"handler nope":    "fail",
		"cri socket":      "ok",
		"docker":          "ok",
		"pod infra image": "ok",
	} {
		if got := byName[name].Status; got != want {
			t.Errorf("%s: %q (%s), want %s", name, got, byName[name].Detail, want)
		}
	}
	if !strings.Contains(byName["runtime broken"].Detail, "is a directory") || !strings.Contains(byName["cri socket"].Detail, "0660") {
		t.Errorf("details: %q / %q", byName["runtime broken"].Detail, byName["cri socket"].Detail)
	}
}
