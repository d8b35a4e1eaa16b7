package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestRunscNetwork(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--network=host"}, "host"},
		{[]string{"-network=none"}, "none"},
		{[]string{"--debug", "--network", "host"}, "host"},
		{[]string{"--network=host", "--network=sandbox"}, "sandbox"},
		{[]string{"--platform=kvm", "--networking=x", "network=host"}, ""},
	} {
		if got := runscNetwork(tc.args); got != tc.want {
			t.Errorf("runscNetwork(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// What `runsc --version` answers: Debian's, an upstream release, a build without a version.
const (
	debianRunsc  = "runsc version 0.0~20221219.0"
	releaseRunsc = "runsc version release-20251006.0"
	devRunsc     = "runsc version VERSION_MISSING"
)

func TestGVisorChecksWarnAboutTheSandboxNetwork(t *testing.T) {
	info := system.Info{Runtimes: map[string]system.RuntimeWithStatus{
		"gvisor":         {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--network=host"}}},
		"gvisor-nonet":   {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: []string{"--network", "none"}}},
		"gvisor-sandbox": {Runtime: system.Runtime{Path: "/usr/bin/runsc"}},
		"runc":           {Runtime: system.Runtime{Path: "runc"}},
	}}
	probes := func(version string, rmem bool, rmemErr error) gvisorProbes {
		return gvisorProbes{
			version:               func(string) string { return version },
			rmemDefaultInNewNetns: func() (bool, error) { return rmem, rmemErr },
		}
	}
	for _, tc := range []struct {
		name    string
		plugin  string
		probes  gvisorProbes
		says    []string // empty: no warning
		saysNot []string
	}{
		{"old runsc, Linux 6.x, CNI", "cni", probes(debianRunsc, true, nil),
			[]string{"default --network=sandbox", "0.0~20221219.0 fails every pod on this kernel", "gVisor issue 10704", "before the CNI ADD", `"runtimeArgs": ["--network=host"]`}, nil},
		{"old runsc, Linux 6.x, Docker's bridge", "", probes(debianRunsc, true, nil),
			[]string{"fails every pod on this kernel", `"--network=host"`}, []string{"CNI"}},
		{"new runsc, CNI", "cni", probes(releaseRunsc, true, nil),
			[]string{"before the CNI ADD"}, []string{"fails every pod"}},
		{"new runsc, Docker's bridge: gVisor's network works", "", probes(releaseRunsc, true, nil), nil, nil},
		{"old runsc, an older kernel, Docker's bridge", "", probes(debianRunsc, false, nil), nil, nil},
		{"unknown version, Linux 6.x", "", probes(devRunsc, true, nil),
			[]string{"unless this runsc has the fix of gVisor issue 10704"}, nil},
		{"old runsc, kernel not checkable", "", probes(debianRunsc, false, errors.New("unshare a network namespace: operation not permitted")),
			[]string{"could not be checked here", "operation not permitted"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := gvisorChecks(info, tc.plugin, tc.probes)
			if len(tc.says) == 0 {
				if len(checks) != 0 {
					t.Errorf("want no warning, got %+v", checks)
				}
				return
			}
			if len(checks) != 1 || checks[0].Name != "runtime gvisor-sandbox network" || checks[0].Status != Warn {
				t.Fatalf("want one warning about gvisor-sandbox, got %+v", checks)
			}
			d := checks[0].Detail
			for _, s := range tc.says {
				if !strings.Contains(d, s) {
					t.Errorf("%q does not say %q", d, s)
				}
			}
			for _, s := range tc.saysNot {
				if strings.Contains(d, s) {
					t.Errorf("%q says %q", d, s)
				}
			}
			if strings.Contains(d, "\n") {
				t.Errorf("%q is not one line", d)
			}
		})
	}
}

// Run puts the warning right after the runtime's own line, and a warning does not fail the
// doctor.
func TestDoctorWarnsAboutGVisorsDefaultNetwork(t *testing.T) {
	dir := t.TempDir()
	runsc := filepath.Join(dir, "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\necho 'runsc version 0.0~20221219.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	fake := libdocker.NewFake()
	fake.AddRuntime("gvisor", runsc, "--network=host")
	fake.AddRuntime("gvisor-sandbox", runsc)
	cfg := config.Default() // --network-plugin=cni
	cfg.ContainerRuntimeEndpoint = "unix://" + filepath.Join(dir, "cri.sock")
	checks := Run(context.Background(), fake, cfg)
	for i, c := range checks {
		if c.Name == "runtime gvisor network" {
			t.Errorf("warning about a runsc with --network=host: %+v", c)
		}
		if c.Name != "runtime gvisor-sandbox network" {
			continue
		}
		if c.Status != Warn || !strings.Contains(c.Detail, "before the CNI ADD") {
			t.Errorf("gvisor-sandbox: %s %q", c.Status, c.Detail)
		}
		if i == 0 || checks[i-1].Name != "runtime gvisor-sandbox" {
			t.Errorf("the warning does not follow the runtime's line: %+v", checks)
		}
		if find(checks, "runtime gvisor-sandbox").Status != OK {
			t.Errorf("the runtime's binary check: %+v", find(checks, "runtime gvisor-sandbox"))
		}
		return
	}
	t.Errorf("no warning about gvisor-sandbox in %+v", checks)
}
