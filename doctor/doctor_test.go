package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cri-dockerd/cri-dockerd/config"
	"github.com/cri-dockerd/cri-dockerd/libdocker"
)

func find(checks []Check, name string) Check {
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	return Check{Name: name, Status: "missing"}
}

func TestDoctorFindsBrokenRuntimesAndAliases(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good-runtime")
	notExec := filepath.Join(dir, "not-executable")
	for path, mode := range map[string]os.FileMode{good: 0o755, notExec: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	fake := libdocker.NewFake()
	fake.AddRuntime("good", good)
	fake.AddRuntime("youki", dir) // the mistake from the field: a directory
	fake.AddRuntime("gone", filepath.Join(dir, "missing"))
	fake.AddRuntime("noexec", notExec)
	cfg := config.Default()
	cfg.ContainerRuntimeEndpoint = "unix://" + filepath.Join(dir, "cri.sock")
	cfg.RuntimeHandlerAliases = map[string]string{"fine": "good", "spin": "io.containerd.spin.v2"}
	cfg.PrivilegedWithoutHostDevices = []string{"fine", "good", "docker", "katta"}

	checks := Run(context.Background(), fake, cfg)
	for name, want := range map[string]string{
		"runtime good":      "ok",
		"runtime youki":     "is a directory",
		"runtime gone":      "does not exist",
		"runtime noexec":    "is not executable",
		"handler fine":      "ok",
		"handler spin":      "Docker does not know it",
		"docker":            "API 1.41",
		"cri socket":        "does not exist",
		"config":            "ok",
		"privileged fine":   "ok",
		"privileged good":   "ok",
		"privileged docker": "ok",
		"privileged katta":  "no pod can use it",
	} {
		c := find(checks, name)
		if want == "ok" {
			if c.Status != OK {
				t.Errorf("%s: %s %q, want ok", name, c.Status, c.Detail)
			}
			continue
		}
		if !strings.Contains(c.Detail, want) {
			t.Errorf("%s: %s %q, want it to say %q", name, c.Status, c.Detail, want)
		}
	}
	if !Failed(checks) || find(checks, "runtime youki").Status != Fail {
		t.Error("a runtime whose path is a directory must fail the doctor")
	}

	// A shim alias is fine where Docker runs shims unconfigured.
	fake.SetAPIVersion("1.43")
	if c := find(Run(context.Background(), fake, cfg), "handler spin"); c.Status != OK {
		t.Errorf("shim alias on API 1.43: %s %q", c.Status, c.Detail)
	}

	var buf bytes.Buffer
	if err := Print(&buf, checks, true); err != nil {
		t.Fatal(err)
	}
	var decoded []Check
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil || len(decoded) != len(checks) {
		t.Errorf("json output: %v, %d checks", err, len(decoded))
	}
	buf.Reset()
	_ = Print(&buf, checks, false)
	if lines := strings.Count(buf.String(), "\n"); lines != len(checks) {
		t.Errorf("text output has %d lines for %d checks", lines, len(checks))
	}
}

func TestDoctorCNIChecks(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	if c := cniChecks(conf, []string{bin}); c[0].Status != Fail {
		t.Errorf("empty config dir: %+v", c)
	}
	list := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"},{"type":"portmap"}]}`
	if err := os.WriteFile(filepath.Join(conf, "10-pods.conflist"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "bridge"), []byte{}, 0o755); err != nil {
		t.Fatal(err)
	}
	c := cniChecks(conf, []string{bin})
	if c[1].Status != Fail || !strings.Contains(c[1].Detail, "portmap not found") {
		t.Errorf("missing plugin: %+v", c)
	}
	if err := os.WriteFile(filepath.Join(bin, "portmap"), []byte{}, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := cniChecks(conf, []string{"/nonexistent", bin}); c[1].Status != OK {
		t.Errorf("all plugins present: %+v", c)
	}
}
