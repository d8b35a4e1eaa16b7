package config

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParseRuntimeHandler(t *testing.T) {
	for _, tc := range []struct {
		in, name, runtime, err string
	}{
		{in: "spin=io.containerd.spin.v2", name: "spin", runtime: "io.containerd.spin.v2"},
		{in: " kata = kata-runtime ", name: "kata", runtime: "kata-runtime"},
		{in: "spin", err: "want NAME=DOCKER_RUNTIME"},
		{in: "=runc", err: "want NAME=DOCKER_RUNTIME"},
		{in: "io.containerd.spin.v2=io.containerd.spin.v2", err: "not a RuntimeClass handler name"},
		{in: "Spin=runc", err: "not a RuntimeClass handler name"},
		{in: "x=bad/runtime", err: "not a Docker runtime name"},
	} {
		name, rt, err := ParseRuntimeHandler(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || name != tc.name || rt != tc.runtime {
			t.Errorf("%q: got %q %q %v", tc.in, name, rt, err)
		}
	}
}

func parse(t *testing.T, args []string, file string) (*Config, error) {
	t.Helper()
	cfg := Default()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if file != "" {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := LoadFile(path, fs); err != nil {
			return nil, err
		}
	}
	return cfg, cfg.Validate()
}

func TestFlagsAndConfigFile(t *testing.T) {
	cfg, err := parse(t, []string{"--runtime-handler", "spin=io.containerd.spin.v2", "--runtime-handler=kata=kata-runtime", "--log-level", "debug"},
		"runtime-handler: [gvisor=runsc]\nlog-level: warn\npod-infra-container-image: example.com/pause:1\nruntime-request-timeout: 30s\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"spin": "io.containerd.spin.v2", "kata": "kata-runtime", "gvisor": "runsc"}
	if len(cfg.RuntimeHandlerAliases) != 3 {
		t.Errorf("aliases %v, want %v", cfg.RuntimeHandlerAliases, want)
	}
	for k, v := range want {
		if cfg.RuntimeHandlerAliases[k] != v {
			t.Errorf("alias %s = %q, want %q", k, cfg.RuntimeHandlerAliases[k], v)
		}
	}
	if cfg.LogLevel != "debug" {
		t.Errorf("log level %q: the command line must win over the file", cfg.LogLevel)
	}
	if cfg.PodInfraContainerImage != "example.com/pause:1" || cfg.RuntimeRequestTimeout.Seconds() != 30 {
		t.Errorf("file settings not applied: %+v", cfg)
	}
	cfg, err = parse(t, []string{"--privileged-without-host-devices", "kata"}, "privileged-without-host-devices: [gvisor, spin]\n")
	if err != nil || !slices.Equal(cfg.PrivilegedWithoutHostDevices, []string{"kata"}) {
		t.Errorf("privileged-without-host-devices: the command line wins over the file: %v %v", cfg.PrivilegedWithoutHostDevices, err)
	}
	cfg, err = parse(t, nil, "privileged-without-host-devices: [gvisor, spin]\n")
	if err != nil || !slices.Equal(cfg.PrivilegedWithoutHostDevices, []string{"gvisor", "spin"}) {
		t.Errorf("privileged-without-host-devices from the file: %v %v", cfg.PrivilegedWithoutHostDevices, err)
	}
	cfg, err = parse(t, nil, "runtime-handler:\n  wasm: io.containerd.wasmtime.v1\n")
	if err != nil || cfg.RuntimeHandlerAliases["wasm"] != "io.containerd.wasmtime.v1" {
		t.Errorf("map form: %v %v", cfg, err)
	}
}

func TestInvalidSettingsSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		file string
		want string
	}{
		{args: []string{"--container-runtime-endpoint", "tcp://0.0.0.0:1"}, want: "tcp endpoints are not served on Linux"},
		{args: []string{"--network-plugin", "kubenet"}, want: `--network-plugin "kubenet"`},
		{args: []string{"--log-level", "loud"}, want: "--log-level"},
		{args: []string{"--runtime-handler", "docker=runc"}, want: "reserved"},
		{args: []string{"--privileged-without-host-devices", "io.containerd.kata.v2"}, want: `--privileged-without-host-devices "io.containerd.kata.v2": not a RuntimeClass handler name`},
		{file: "no-such-setting: 1\n", want: `unknown setting "no-such-setting"`},
		{file: "log-level: [a, [b]]\n", want: "nested"},
	} {
		_, err := parse(t, tc.args, tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: error %v, want one saying %q", tc.args, tc.file, err, tc.want)
		}
	}
}

// A handler named both on the command line and in the file takes the command line's runtime,
// in each form the file may write it; the file's other handlers are still added.
func TestCommandLineWinsForAHandlerAlsoInTheFile(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]string
	}{
		{"runtime-handler: [spin=io.containerd.spin.v1, gvisor=runsc]\n", map[string]string{"spin": "io.containerd.spin.v2", "gvisor": "runsc"}},
		{"runtime-handler:\n  spin: io.containerd.spin.v1\n  gvisor: runsc\n", map[string]string{"spin": "io.containerd.spin.v2", "gvisor": "runsc"}},
		{"runtime-handler: spin=io.containerd.spin.v1\n", map[string]string{"spin": "io.containerd.spin.v2"}},
	} {
		cfg, err := parse(t, []string{"--runtime-handler", "spin=io.containerd.spin.v2"}, tc.file)
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		if !maps.Equal(cfg.RuntimeHandlerAliases, tc.want) {
			t.Errorf("%q with --runtime-handler spin=io.containerd.spin.v2: aliases %v, want %v", tc.file, cfg.RuntimeHandlerAliases, tc.want)
		}
	}
}

// Each limit Validate checks, on both sides of its edge.
func TestValidateLimitsAtTheirEdges(t *testing.T) {
	name63 := strings.Repeat("a", 63)
	for _, tc := range []struct {
		args []string
		want string // "" accepted, else a part of the error
	}{
		{[]string{"--runtime-handler", name63 + "=runc"}, ""},
		{[]string{"--runtime-handler", name63 + "a=runc"}, "not a RuntimeClass handler name"},
		{[]string{"--runtime-request-timeout", "1ns"}, ""},
		{[]string{"--runtime-request-timeout", "0s"}, "--runtime-request-timeout must be positive"},
		{[]string{"--image-pull-progress-deadline", "0s"}, ""},
		{[]string{"--image-pull-progress-deadline", "-1ns"}, "--image-pull-progress-deadline must not be negative"},
		{[]string{"--network-plugin-mtu", "0"}, ""},
		{[]string{"--network-plugin-mtu", "576"}, ""},
		{[]string{"--network-plugin-mtu", "575"}, "below 576"},
		{[]string{"--network-plugin-mtu", "65535"}, ""},
		{[]string{"--network-plugin-mtu", "65536"}, "--network-plugin-mtu 65536"},
		{[]string{"--default-runtime-handler-name", ""}, ""},
		{[]string{"--default-runtime-handler-name", "Docker"}, `default runtime handler "Docker"`},
		{[]string{"--streaming-bind-addr", ""}, ""},
		{[]string{"--streaming-bind-addr", "127.0.0.1"}, ""},
		{[]string{"--streaming-bind-addr", "[::1]"}, ""},
		{[]string{"--streaming-bind-addr", "127.0.0.1:0"}, ""},
		{[]string{"--streaming-bind-addr", ":65535"}, ""},
		{[]string{"--streaming-bind-addr", ":65536"}, `port "65536"`},
		{[]string{"--streaming-bind-addr", ":-1"}, `port "-1"`},
		{[]string{"--streaming-bind-addr", "a b:1"}, "want HOST:PORT, HOST or :PORT"},
		{[]string{"--metrics-bind-addr", "127.0.0.1:9099"}, ""},
		{[]string{"--metrics-bind-addr", "127.0.0.1"}, "--metrics-bind-addr"},
		{[]string{"--metrics-bind-addr", "127.0.0.1:9099", "--enable-pprof"}, ""},
		{[]string{"--enable-pprof"}, "--enable-pprof serves /debug/pprof on the metrics listener, and there is none: add --metrics-bind-addr HOST:PORT"},
		{[]string{"--enable-pprof=false"}, ""},
		{[]string{"--max-concurrent-starts", "-1"}, ""},
		{[]string{"--max-concurrent-starts", "-2"}, "--max-concurrent-starts must be"},
		{[]string{"--max-container-log-line-size", "1"}, ""},
		{[]string{"--max-container-log-line-size", "16777216"}, ""},
		{[]string{"--max-container-log-line-size", "16777217"}, "--max-container-log-line-size 16777217"},
		{[]string{"--max-container-log-line-size", "0"}, "--max-container-log-line-size 0"},
		{[]string{"--max-container-log-line-size", "-1"}, "a line is always cut"},
	} {
		_, err := parse(t, tc.args, "")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// pprof is off unless asked, on the command line or by the config file's key of the same name.
func TestEnablePprofIsOffByDefaultAndSetByItsKey(t *testing.T) {
	for _, tc := range []struct {
		args []string
		file string
		want bool
	}{
		{[]string{"--metrics-bind-addr", "127.0.0.1:9099"}, "", false},
		{[]string{"--metrics-bind-addr", "127.0.0.1:9099", "--enable-pprof"}, "", true},
		{nil, "metrics-bind-addr: 127.0.0.1:9099\nenable-pprof: true\n", true},
	} {
		cfg, err := parse(t, tc.args, tc.file)
		if err != nil {
			t.Fatalf("%q, file %q: %v", tc.args, tc.file, err)
		}
		if cfg.EnablePprof != tc.want {
			t.Errorf("%q, file %q: EnablePprof %v, want %v", tc.args, tc.file, cfg.EnablePprof, tc.want)
		}
	}
}

// --max-concurrent-starts: 0 is four times the CPUs, -1 no bound, a number that number.
func TestConcurrentStarts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 8}, {[]string{"--max-concurrent-starts", "0"}, 8}, {[]string{"--max-concurrent-starts", "-1"}, 0}, {[]string{"--max-concurrent-starts", "3"}, 3}} {
		cfg, err := parse(t, tc.args, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.ConcurrentStarts(2); got != tc.want {
			t.Errorf("%q on 2 CPUs: %d starts at once, want %d", tc.args, got, tc.want)
		}
	}
}
