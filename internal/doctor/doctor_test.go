package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
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
	t.Setenv("PATH", dir) // hermetic: the stock runtimes' bare "runc" is not looked up on the host
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

// runcFeatures is the status Docker 25+ reports for a runtime whose binary it ran: the OCI
// features of runc (here Docker 29's own runc 1.5.1, built without a commit).
func runcFeatures(version, commit string) map[string]string {
	raw, _ := json.Marshal(map[string]any{
		"ociVersionMin": "1.0.0", "ociVersionMax": "1.3.0",
		"annotations": map[string]string{
			"io.github.seccomp.libseccomp.version": "2.5.4",
			"org.opencontainers.runc.commit":       commit,
			"org.opencontainers.runc.version":      version,
		},
	})
	return map[string]string{"org.opencontainers.runtime-spec.features": string(raw)}
}

// TestDoctorChecksTheRuntimesDockerRuns: the doctor judges the binary Docker runs, from what
// Docker reports, and looks in its own PATH only for a bare name Docker says nothing about; a
// runtime daemon.json defines by runtimeType (which /info does not report) is a valid shim.
func TestDoctorChecksTheRuntimesDockerRuns(t *testing.T) {
	dir := t.TempDir()
	ourRunc := filepath.Join(dir, "bin", "runc") // cri-dockerd's PATH: not dockerd's
	if err := os.MkdirAll(filepath.Dir(ourRunc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ourRunc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	absRunc := filepath.Join(dir, "opt", "runc")
	if err := os.MkdirAll(filepath.Dir(absRunc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(absRunc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	emptyPath, ourPath := filepath.Join(dir, "empty"), filepath.Dir(ourRunc)

	type want struct {
		status   Status
		says     []string
		saysNot  []string
		forCheck string
	}
	for _, tc := range []struct {
		name  string
		setup func(f *libdocker.Fake)
		path  string
		want  []want
	}{
		{
			name: "Docker 29: runc from its own PATH, reported by its features",
			setup: func(f *libdocker.Fake) {
				f.SetAPIVersion("1.51")
				f.SetRuncCommit("")
				f.SetRuntimeStatus("runc", runcFeatures("1.5.1", ""))
				f.SetRuntimeStatus("io.containerd.runc.v2", runcFeatures("1.5.1", ""))
			},
			path: ourPath, // a runc of another version in ours: not the one Docker runs
			want: []want{
				{forCheck: "runtime runc", status: OK, says: []string{"runc from dockerd's PATH", "Docker ran runc 1.5.1", "(Docker's default)"}, saysNot: []string{ourRunc}},
				{forCheck: "runtime io.containerd.runc.v2", status: OK, says: []string{"Docker ran runc 1.5.1"}, saysNot: []string{ourRunc}},
			},
		},
		{
			name: "Docker 29: a runtime defined by runtimeType",
			setup: func(f *libdocker.Fake) {
				f.SetAPIVersion("1.51")
				f.AddShimRuntime("x", "io.containerd.runc.v2", nil)
				f.AddShimRuntime("runsc", "io.containerd.runsc.v1", map[string]any{"TypeUrl": "io.containerd.runsc.v1.options", "ConfigPath": "/etc/containerd/runsc.toml"})
			},
			path: emptyPath,
			want: []want{
				{forCheck: "runtime x", status: OK, says: []string{"containerd shim runtime", "runtimeType"}},
				{forCheck: "runtime runsc", status: OK, says: []string{"containerd shim runtime"}},
			},
		},
		{
			name: "an absolute path is checked as it is, with the version Docker read",
			setup: func(f *libdocker.Fake) {
				f.SetAPIVersion("1.51")
				f.AddRuntime("alt", absRunc, "--root", "/run/alt")
				f.SetRuntimeStatus("alt", runcFeatures("1.5.1", "v1.5.1-0-gabcdef0"))
			},
			path: emptyPath,
			want: []want{{forCheck: "runtime alt", status: OK, says: []string{"checked " + absRunc + " --root /run/alt", "Docker ran runc 1.5.1, commit v1.5.1-0-gabcdef0"}}},
		},
		{
			name:  "Docker 20.10: the default runtime's commit, no status (API 1.41)",
			setup: func(f *libdocker.Fake) { f.SetRuntimeStatus("io.containerd.runc.v2", runcFeatures("9.9.9", "")) },
			path:  ourPath,
			want: []want{
				{forCheck: "runtime runc", status: OK, says: []string{"runc from dockerd's PATH", "Docker ran it: commit 1.1.5+ds1-1+deb12u1"}, saysNot: []string{ourRunc}},
				// Docker says nothing of this one (the status needs API 1.44): our PATH, named.
				{forCheck: "runtime io.containerd.runc.v2", status: OK, says: []string{"checked " + ourRunc, "cri-dockerd's PATH"}, saysNot: []string{"9.9.9"}},
			},
		},
		{
			name:  "a bare name Docker says nothing about and our PATH lacks only warns",
			setup: func(f *libdocker.Fake) { f.SetRuncCommit("N/A") },
			path:  emptyPath,
			want: []want{
				{forCheck: "runtime runc", status: Warn, says: []string{"runc is not found in PATH", "dockerd looks it up in its own PATH"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			fake := libdocker.NewFake()
			tc.setup(fake)
			info, err := fake.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			checks := runtimeChecks(info)
			for _, w := range tc.want {
				c := find(checks, w.forCheck)
				if c.Status != w.status {
					t.Errorf("%s: %s %q, want %s", w.forCheck, c.Status, c.Detail, w.status)
				}
				for _, s := range w.says {
					if !strings.Contains(c.Detail, s) {
						t.Errorf("%s: %q does not say %q", w.forCheck, c.Detail, s)
					}
				}
				for _, s := range w.saysNot {
					if strings.Contains(c.Detail, s) {
						t.Errorf("%s: %q names %q, which is not what Docker runs", w.forCheck, c.Detail, s)
					}
				}
			}
		})
	}
}

// The NRI check names who serves the socket: cri-dockerd is fine, anyone else takes it from us.
func TestNRICheckNamesTheSocketsServer(t *testing.T) {
	cfg := config.Default()
	cfg.NRISocket = filepath.Join(shortTempDir(t), "nri.sock")
	cfg.NRIPluginPath = t.TempDir()
	if c := nriCheck(cfg, "/proc"); c.Status != OK || !strings.Contains(c.Detail, "is free") {
		t.Errorf("a free socket: %+v", c)
	}
	l, err := net.Listen("unix", cfg.NRISocket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The test binary serves it: not cri-dockerd, so a warning naming the process.
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, strconv.Itoa(os.Getpid())), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, strconv.Itoa(os.Getpid()), "comm"), []byte("containerd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := nriCheck(cfg, proc); c.Status != Warn || !strings.Contains(c.Detail, "containerd (pid") {
		t.Errorf("a socket containerd serves: %+v", c)
	}
	if err := os.WriteFile(filepath.Join(proc, strconv.Itoa(os.Getpid()), "comm"), []byte("cri-dockerd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := nriCheck(cfg, proc); c.Status != OK {
		t.Errorf("a socket cri-dockerd serves: %+v", c)
	}
	cfg.NRI = false
	if c := nriCheck(cfg, proc); c.Status != Info {
		t.Errorf("NRI off: %+v", c)
	}
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "doc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
