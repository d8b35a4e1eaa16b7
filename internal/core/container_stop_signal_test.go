package core

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// A stop signal reaches Docker's Config.StopSignal, which Docker sends on every stop; the
// status reports the signal in effect: the one asked for, the image's STOPSIGNAL, or SIGTERM.
func TestStopSignalReachesDockerAndTheStatus(t *testing.T) {
	fake := libdocker.NewFake()
	img := libdocker.FakeImage("", "", "example.com/stops:1")
	img.Config.StopSignal = "SIGQUIT"
	fake.AddImage(img)
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	for _, tc := range []struct {
		name, image string
		signal      runtimeapi.Signal
		wantDocker  string
		wantStatus  runtimeapi.Signal
	}{
		{"asked", testImage, runtimeapi.Signal_SIGNAL_SIGUSR1, "SIGUSR1", runtimeapi.Signal_SIGNAL_SIGUSR1},
		{"realtime", testImage, runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, "SIGRTMIN+3", runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3},
		{"asked over the image's", "example.com/stops:1", runtimeapi.Signal_SIGNAL_SIGINT, "SIGINT", runtimeapi.Signal_SIGNAL_SIGINT},
		{"the image's", "example.com/stops:1", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGQUIT", runtimeapi.Signal_SIGNAL_SIGQUIT},
		{"none", testImage, runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", runtimeapi.Signal_SIGNAL_SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := containerConfig("c")
			cfg.Metadata.Attempt = uint32(len(tc.name)) // a name of its own
			cfg.Image = &runtimeapi.ImageSpec{Image: tc.image}
			cfg.StopSignal = tc.signal
			resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
			if err != nil {
				t.Fatal(err)
			}
			c, err := fake.InspectContainer(ctx, resp.ContainerId)
			if err != nil {
				t.Fatal(err)
			}
			if c.Config.StopSignal != tc.wantDocker {
				t.Errorf("Docker's StopSignal %q, want %q", c.Config.StopSignal, tc.wantDocker)
			}
			st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: resp.ContainerId})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.StopSignal != tc.wantStatus {
				t.Errorf("status stop_signal %v, want %v", st.Status.StopSignal, tc.wantStatus)
			}
		})
	}
	cfg := containerConfig("bad")
	cfg.StopSignal = runtimeapi.Signal(999)
	_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("stop_signal 999: %v, want InvalidArgument", err)
	}
}

// Every CRI signal has a Docker name that comes back as itself, and Docker's other spellings
// (numbers, no SIG, lower case) are read.
func TestStopSignalNames(t *testing.T) {
	for n, name := range runtimeapi.Signal_name {
		sig := runtimeapi.Signal(n)
		if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
			continue
		}
		docker, err := dockerStopSignal(sig)
		if err != nil || docker == "" {
			t.Errorf("%s: Docker name %q, %v", name, docker, err)
			continue
		}
		if back := criStopSignal(docker); back != sig {
			t.Errorf("%s: Docker's %q reads back as %v", name, docker, back)
		}
	}
	for docker, want := range map[string]runtimeapi.Signal{
		"9":          runtimeapi.Signal_SIGNAL_SIGKILL,
		"10":         runtimeapi.Signal_SIGNAL_SIGUSR1,
		"usr2":       runtimeapi.Signal_SIGNAL_SIGUSR2,
		"TERM":       runtimeapi.Signal_SIGNAL_SIGTERM,
		"34":         runtimeapi.Signal_SIGNAL_SIGRTMIN,
		"35":         runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1,
		"49":         runtimeapi.Signal_SIGNAL_SIGRTMINPLUS15,
		"50":         runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS14,
		"63":         runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS1,
		"64":         runtimeapi.Signal_SIGNAL_SIGRTMAX,
		"RTMAX-2":    runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS2,
		"SIGNOTHING": runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT,
		"65":         runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT,
	} {
		if got := criStopSignal(docker); got != want {
			t.Errorf("Docker's %q: %v, want %v", docker, got, want)
		}
	}
}
