package core

import (
	"context"
	"maps"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker's own log of a container is bounded where the daemon would keep an unbounded
// json-file log, and left as the admin set it otherwise: what Docker recorded for the
// container is checked, options merged as Docker merges them.
func TestDockerLogIsBoundedOnlyWhereTheDaemonSetsNoBound(t *testing.T) {
	ours := DockerLogLimit{MaxSize: "10m", MaxFile: 3}
	for _, tc := range []struct {
		name       string
		limit      DockerLogLimit
		driver     string
		daemonOpts map[string]string
		wantType   string
		wantOpts   map[string]string
	}{
		{"json-file without options gets ours", ours, "json-file", nil,
			"json-file", map[string]string{"max-size": "10m", "max-file": "3"}},
		{"json-file with other options keeps them beside ours", ours, "json-file", map[string]string{"labels": "app", "max-file": "9"},
			"json-file", map[string]string{"max-size": "10m", "max-file": "3", "labels": "app"}},
		{"the daemon's max-size wins", ours, "json-file", map[string]string{"max-size": "100m", "max-file": "2"},
			"json-file", map[string]string{"max-size": "100m", "max-file": "2"}},
		{"local is left alone", ours, "local", nil, "local", map[string]string{}},
		{"journald is left alone", ours, "journald", map[string]string{"tag": "x"}, "journald", map[string]string{"tag": "x"}},
		{"off leaves Docker's default", DockerLogLimit{}, "json-file", nil, "json-file", map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := libdocker.NewFake()
			fake.SetDaemonLogConfig(tc.driver, tc.daemonOpts)
			s := newTestService(t, fake, Options{DockerLogLimit: tc.limit})
			podID, podCfg := runPod(t, s, "p", "")
			id := createContainer(t, s, podID, podCfg, "c")
			c, err := fake.InspectContainer(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			got := c.HostConfig.LogConfig
			if got.Type != tc.wantType || !maps.Equal(got.Config, tc.wantOpts) {
				t.Errorf("Docker recorded log config %s %v, want %s %v", got.Type, got.Config, tc.wantType, tc.wantOpts)
			}
			// The sandbox logs nothing: it keeps the daemon's settings, from which the
			// containers' are decided.
			sb, _ := fake.InspectContainer(context.Background(), podID)
			if sb.HostConfig.LogConfig.Type != tc.driver || sb.HostConfig.LogConfig.Config["max-size"] != tc.daemonOpts["max-size"] {
				t.Errorf("sandbox log config %v, want the daemon's %s %v", sb.HostConfig.LogConfig, tc.driver, tc.daemonOpts)
			}
		})
	}
}

// The daemon's default options are read from a sandbox once, not at every create.
func TestDaemonLogOptionsAreReadOncePerMaxAge(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{DockerLogLimit: DockerLogLimit{MaxSize: "10m", MaxFile: 3}})
	podID, podCfg := runPod(t, s, "p", "")
	before := fake.Calls("InspectContainer")
	for _, name := range []string{"a", "b", "c"} {
		createContainer(t, s, podID, podCfg, name)
	}
	if n := fake.Calls("InspectContainer") - before; n > 1 {
		t.Errorf("%d inspects for three creates, want at most one", n)
	}
}

// Docker's json-file driver refuses an option it does not know, as the fake does.
func TestFakeRefusesAnUnknownLogOption(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetDaemonLogConfig("json-file", map[string]string{"max-bytes": "1"})
	s := newTestService(t, fake, Options{})
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")})
	if err == nil {
		t.Fatal("a sandbox was created with an unknown json-file option")
	}
}
