package core

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestHandlerResolvesToDockerRuntimeForSandboxAndContainers(t *testing.T) {
	for _, tc := range []struct {
		handler     string
		aliases     map[string]string
		apiVersion  string
		wantRuntime string // as Docker records it
	}{
		{handler: "", wantRuntime: "runc"},
		{handler: "docker", wantRuntime: "runc"},
		{handler: "kata", wantRuntime: "kata"},
		{handler: "spin", aliases: map[string]string{"spin": "io.containerd.spin.v2"}, apiVersion: "1.43", wantRuntime: "io.containerd.spin.v2"},
		{handler: "alt", aliases: map[string]string{"alt": "kata"}, wantRuntime: "kata"},
	} {
		t.Run(tc.handler, func(t *testing.T) {
			fake := libdocker.NewFake()
			fake.AddRuntime("kata", "/usr/bin/kata-runtime")
			if tc.apiVersion != "" {
				fake.SetAPIVersion(tc.apiVersion)
			}
			s := newTestService(t, fake, Options{RuntimeHandlerAliases: tc.aliases})
			podID, podCfg := runPod(t, s, "p", tc.handler)
			c1 := createContainer(t, s, podID, podCfg, "c1")
			c2 := createContainer(t, s, podID, podCfg, "c2")
			for _, id := range []string{podID, c1, c2} {
				if got := dockerRuntimeOf(t, fake, id); got != tc.wantRuntime {
					t.Errorf("container %s: HostConfig.Runtime = %q, want %q", id[:12], got, tc.wantRuntime)
				}
			}
			st, err := s.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.RuntimeHandler != tc.handler {
				t.Errorf("PodSandboxStatus.runtime_handler = %q, want %q as requested", st.Status.RuntimeHandler, tc.handler)
			}
			list, err := s.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
			if err != nil || len(list.Items) != 1 || list.Items[0].RuntimeHandler != tc.handler {
				t.Errorf("ListPodSandbox = %v, %v; want one pod with handler %q", list, err, tc.handler)
			}
		})
	}
}

func TestRunPodSandboxUnknownHandlerLeavesNothing(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"spin": "io.containerd.spin.v2"}})
	for _, tc := range []struct{ handler, wantInMessage string }{
		{"nosuch", "--runtime-handler nosuch=DOCKER_RUNTIME"},
		// Docker 20.10 (API 1.41) does not run unconfigured containerd shims.
		{"spin", `alias of Docker runtime "io.containerd.spin.v2"`},
	} {
		_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: tc.handler})
		wantCode(t, err, codes.InvalidArgument)
		for _, want := range []string{fmt.Sprintf("runtime handler %q", tc.handler), "Docker knows: io.containerd.runc.v2, runc", "daemon.json", tc.wantInMessage} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
	if n := fake.Calls("CreateContainer"); n != 0 {
		t.Errorf("CreateContainer called %d times for an unknown handler", n)
	}
}

func TestRuntimeAddedToDockerLaterIsFoundWithoutRestart(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	s.runtimes.minInterval = 0
	if _, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: "gvisor"}); err == nil {
		t.Fatal("unknown handler accepted")
	}
	fake.AddRuntime("gvisor", "/usr/local/bin/runsc")
	podID, _ := runPod(t, s, "p", "gvisor")
	if got := dockerRuntimeOf(t, fake, podID); got != "gvisor" {
		t.Errorf("runtime = %q, want gvisor", got)
	}
}

func TestDockerInfoIsCachedNotCalledPerPod(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{})
	fake.ResetCalls()
	for i := 0; i < 20; i++ {
		runPod(t, s, fmt.Sprintf("p%d", i), "kata")
	}
	if n := fake.InfoCalls(); n != 0 {
		t.Errorf("20 pods with a known handler made %d /info calls, want 0", n)
	}
	// A burst of pods with an unknown handler shares one refresh.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, _ = s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig(fmt.Sprintf("u%d", i)), RuntimeHandler: "nosuch"})
		}(i)
	}
	wg.Wait()
	if n := fake.InfoCalls(); n > 1 {
		t.Errorf("20 concurrent pods with an unknown handler made %d /info calls, want at most 1", n)
	}
}

func TestCreateContainerTakesRuntimeFromIndexWithoutInspect(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "kata")
	fake.ResetCalls()
	createContainer(t, s, podID, podCfg, "c1")
	if n := fake.Calls("InspectContainer") + fake.Calls("ListContainers"); n != 0 {
		t.Errorf("CreateContainer looked the sandbox up in Docker %d times, want 0", n)
	}
}

func TestContainerGetsPodRuntimeAfterRestart(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	first := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"vm": "kata"}})
	podID, podCfg := runPod(t, first, "p", "vm")

	restarted := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"vm": "kata"}})
	// The index is rebuilt at the start, from the sandbox's labels: no lookup has filled it yet.
	if rt, ok := restarted.sandboxes.get(podID); !ok || rt != (podRuntime{Handler: "vm", DockerRuntime: "kata"}) {
		t.Fatalf("sandbox index after restart: %+v, %v; want handler vm on Docker runtime kata", rt, ok)
	}
	fake.ResetCalls()
	id := createContainer(t, restarted, podID, podCfg, "c1")
	if got := dockerRuntimeOf(t, fake, id); got != "kata" {
		t.Errorf("after restart the container got runtime %q, want kata", got)
	}
	// No list of the sandbox: a missing rebuild would hide behind it. One inspect: the pod's
	// settings (sandbox_settings.go), which a list does not say; the kubelet's PodSandboxStatus,
	// which comes first, would have remembered them.
	if n := fake.Calls("InspectContainer"); n != 2 { // the sandbox's, and ours above
		t.Errorf("CreateContainer after restart made %d inspects, want 1 (the sandbox's settings)", n-1)
	}
	fake.ResetCalls()
	createContainer(t, restarted, podID, podCfg, "c2")
	if n := fake.Calls("InspectContainer") + fake.Calls("ListContainers"); n != 0 {
		t.Errorf("a second CreateContainer after restart looked the sandbox up in Docker %d times, want 0", n)
	}
	if n := fake.Calls("ListContainers"); n != 0 {
		t.Errorf("CreateContainer after restart listed containers %d times, want 0 (the index is rebuilt at start)", n)
	}
}

func TestBrokenRuntimeFailsWithCauseAndLeavesNothing(t *testing.T) {
	fake := libdocker.NewFake()
	dir := t.TempDir() // the classic mistake: the runtime's path is a directory
	fake.AddRuntime("youki", dir)
	fake.BreakRuntime("youki")
	s := newTestService(t, fake, Options{})
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: "youki"})
	wantCode(t, err, codes.FailedPrecondition)
	for _, want := range []string{`runtime handler "youki"`, dir + " is a directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "log.json") {
		t.Errorf("error %q repeats Docker's noise although the cause is known", err)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
}

func TestStatusListsHandlers(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{RuntimeHandlerAliases: map[string]string{"spin": "io.containerd.spin.v2"}})
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range resp.RuntimeHandlers {
		names = append(names, h.Name)
	}
	if got, want := strings.Join(names, ","), ",docker,io.containerd.runc.v2,kata,runc,spin"; got != want {
		t.Errorf("runtime_handlers = %q, want %q", got, want)
	}
	for _, c := range resp.Status.Conditions {
		if !c.Status {
			t.Errorf("condition %s not ready: %s", c.Type, c.Message)
		}
	}
}

func TestStartFailureWithHealthyRuntimeKeepsDockersReason(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	fake.InjectError("StartContainer", fmt.Errorf("OCI runtime create failed: unable to apply caps: operation not permitted: unknown"))
	_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if err == nil || !strings.Contains(err.Error(), "unable to apply caps") || strings.Contains(err.Error(), "cannot run containers") {
		t.Errorf("error %v: want Docker's reason, not a claim that the runtime is broken", err)
	}
}

// kubeadm reads the pause image from the verbose Status under upstream's key, sandboxImage.
func TestVerboseStatusCarriesSandboxImageForKubeadm(t *testing.T) {
	s := newTestService(t, libdocker.NewFake(), Options{PodInfraImage: "registry.k8s.io/pause:3.10.1"})
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(resp.Info["config"]), &cfg); err != nil {
		t.Fatalf("info[config] %q: %v", resp.Info["config"], err)
	}
	if cfg["sandboxImage"] != "registry.k8s.io/pause:3.10.1" {
		t.Errorf("info[config] = %s; want sandboxImage registry.k8s.io/pause:3.10.1", resp.Info["config"])
	}
}

// Status lists Docker's runtimes from /info no older than RuntimeInfoMaxAge: repeated calls
// within it ask Docker nothing, and a runtime added to daemon.json shows once it has passed.
func TestStatusHandlersAreAsFreshAsRuntimeInfoMaxAge(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{RuntimeInfoMaxAge: 200 * time.Millisecond})
	s.runtimes.minInterval = 0
	handlers := func() string {
		t.Helper()
		resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, h := range resp.RuntimeHandlers {
			names = append(names, h.Name)
		}
		return strings.Join(names, ",")
	}
	fake.ResetCalls()
	for range 5 {
		handlers()
	}
	if n := fake.InfoCalls(); n != 0 {
		t.Errorf("5 Status calls right after the start made %d /info calls, want 0", n)
	}
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	time.Sleep(250 * time.Millisecond)
	if got := handlers(); !strings.Contains(got, "kata") {
		t.Errorf("handlers %q after RuntimeInfoMaxAge: the runtime added to Docker is missing", got)
	}
}

// A runtime named without a path is looked up in our PATH, which may not be Docker's: one we
// cannot find is not judged; an absolute path is.
func TestRuntimePathProblemJudgesOnlyWhatItCanSee(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "runtime")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"cri-dockerd-test-no-such-runtime": "",
		filepath.Join(dir, "missing"):      "does not exist",
		dir:                                "is a directory",
		notExec:                            "is not executable",
	} {
		got := runtimePathProblem(path)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("runtimePathProblem(%q) = %q, want %q", path, got, want)
		}
	}
}

// A sandbox that another cri-dockerd made after our start is found by asking Docker, once: its
// containers get its runtime; an ID prefix that matches no sandbox is NotFound.
func TestSandboxMadeAfterOurStartIsLookedUpOnce(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("kata", "/usr/bin/kata-runtime")
	ours := newTestService(t, fake, Options{})
	other := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, other, "p", "kata")
	fake.ResetCalls()
	id := createContainer(t, ours, podID, podCfg, "c1")
	if got := dockerRuntimeOf(t, fake, id); got != "kata" {
		t.Errorf("container of a sandbox made after our start got runtime %q, want kata", got)
	}
	if n := fake.Calls("ListContainers"); n == 0 {
		t.Errorf("the sandbox was found without asking Docker")
	}
	fake.ResetCalls()
	createContainer(t, ours, podID, podCfg, "c2")
	if n := fake.Calls("ListContainers"); n != 0 {
		t.Errorf("%d lists for the second container, want 0: the sandbox is known now", n)
	}
	_, err := ours.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "0123456789ab", Config: containerConfig("c3"), SandboxConfig: podCfg})
	wantCode(t, err, codes.NotFound)
}

// A handler names a Docker runtime of up to 63 characters (an RFC 1123 label); a longer one is
// refused before Docker is asked.
func TestHandlerOf63CharactersIsAccepted(t *testing.T) {
	fake := libdocker.NewFake()
	long := strings.Repeat("k", 63)
	fake.AddRuntime(long, "/usr/bin/kata-runtime")
	fake.AddRuntime(long+"k", "/usr/bin/kata-runtime")
	s := newTestService(t, fake, Options{})
	podID, _ := runPod(t, s, "p", long)
	if got := dockerRuntimeOf(t, fake, podID); got != long {
		t.Errorf("runtime %q, want the 63-character one", got)
	}
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("q"), RuntimeHandler: long + "k"})
	wantCode(t, err, codes.InvalidArgument)
}
