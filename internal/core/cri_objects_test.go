package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
)

// containerRPCs calls every container RPC that acts on a container with id.
func containerRPCs(s *Service, id string) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"StartContainer": func(ctx context.Context) error {
			_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		},
		"StopContainer": func(ctx context.Context) error {
			_, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
			return err
		},
		"RemoveContainer": func(ctx context.Context) error {
			_, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		},
		"UpdateContainerResources": func(ctx context.Context) error {
			_, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}})
			return err
		},
		"UpdateContainerResources without resources": func(ctx context.Context) error {
			_, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id})
			return err
		},
		"ExecSync": func(ctx context.Context) error {
			_, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
			return err
		},
		"ReopenContainerLog": func(ctx context.Context) error {
			_, err := s.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
			return err
		},
		"ContainerStatus": func(ctx context.Context) error {
			_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		},
		"Exec and Attach": func(ctx context.Context) error {
			_, err := s.runningContainer(ctx, id, "exec in")
			return err
		},
		"ContainerStats": func(ctx context.Context) error {
			_, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
			return err
		},
	}
}

func TestContainerRPCsAnswerNotFoundForSandboxesAndForeignContainers(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, _ := runPod(t, s, "p", "")
	foreign, err := fake.CreateContainer(ctx, "web", &container.Config{Image: testImage, Cmd: []string{"sleep", "1000"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.StartContainer(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	// A container that claims the type label but has no sandbox and no CRI name.
	claims, err := fake.CreateContainer(ctx, "claims", &container.Config{Image: testImage, Labels: map[string]string{containerTypeLabel: containerTypeContainer}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.StartContainer(ctx, claims); err != nil {
		t.Fatal(err)
	}
	for what, id := range map[string]string{"sandbox": podID, "sandbox by prefix": podID[:12], "docker run container": foreign, "labelled container": claims} {
		for rpc, call := range containerRPCs(s, id) {
			t.Run(what+"/"+rpc, func(t *testing.T) {
				wantCode(t, call(ctx), codes.NotFound)
			})
		}
	}
	for _, id := range []string{podID, foreign, claims} {
		c, err := fake.InspectContainer(ctx, id)
		if err != nil {
			t.Fatalf("%s was removed: %v", id, err)
		}
		if !c.State.Running {
			t.Errorf("%s was stopped", id)
		}
		if c.HostConfig.CPUShares != 0 {
			t.Errorf("%s was updated: cpu shares %d", id, c.HostConfig.CPUShares)
		}
	}
	if n := fake.ExecRunning(foreign); n != 0 {
		t.Errorf("%d execs in the docker run container", n)
	}
}

func TestStopAndRemoveOfAGoneContainerSucceed(t *testing.T) {
	ctx := context.Background()
	s := newTestService(t, libdocker.NewFake(), Options{})
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "0123456789ab"}); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "0123456789ab"}); err != nil {
		t.Errorf("remove: %v", err)
	}
}

func TestRemoveContainerByPrefixDropsItsLogRecord(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := newTestService(t, libdocker.NewFake(), Options{RootDirectory: root})
	podID, podCfg := runPod(t, s, "p", "")
	podCfg.LogDirectory = t.TempDir()
	id := createContainer(t, s, podID, podCfg, "c")
	if err := os.MkdirAll(filepath.Join(podCfg.LogDirectory, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	// A record is what a rotation leaves (see containerlog): stand one in for it.
	record := filepath.Join(root, "containerlogs", id+".json")
	if err := os.WriteFile(record, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id[:12]}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Errorf("log position record %s left behind (%v)", record, err)
	}
}

// RemoveContainer fails when Docker cannot remove the container, and the container stays for
// the kubelet's next try; that try removes it.
func TestRemoveContainerFailsWhenDockerCannotRemoveIt(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	fake.InjectError("RemoveContainer", fmt.Errorf("driver overlay2 failed to remove root filesystem: device or resource busy"))
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err == nil {
		t.Fatal("RemoveContainer succeeded although Docker failed to remove the container")
	}
	if _, err := fake.InspectContainer(ctx, id); err != nil {
		t.Fatalf("the container is gone after a failed removal: %v", err)
	}
	resp, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	if err != nil || resp == nil {
		t.Fatalf("RemoveContainer = %v, %v; want a response", resp, err)
	}
	if _, err := fake.InspectContainer(ctx, id); !libdocker.IsNotFound(err) {
		t.Errorf("the container is still there after RemoveContainer (%v)", err)
	}
}

func TestCreateContainerRefusesLogPathsOutsideTheLogDirectory(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	for _, tc := range []struct{ dir, path string }{
		{"/var/log/pods/ns_p", "../../x/y.log"},
		{"/var/log/pods/ns_p", "c/../../y.log"},
		{"/var/log/pods/ns_p", "/etc/y.log"},
		{"/var/log/pods/ns_p", "."},
		{"/var/log/pods/ns_p", "c/.."},
		{"/var/log/pods/ns_p", ""}, // no log: fine, checked below
		{"/var/log/pods/../../etc", "c/0.log"},
		{"/var/log/pods/./ns_p", "c/0.log"},
		{"var/log/pods/ns_p", "c/0.log"},
		{"", "c/0.log"},
	} {
		cfg := containerConfig("c")
		cfg.LogPath = tc.path
		sb := proto.Clone(podCfg).(*runtimeapi.PodSandboxConfig)
		sb.LogDirectory = tc.dir
		_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sb})
		if tc.path == "" {
			if err != nil {
				t.Errorf("no log_path: %v", err)
			}
			continue
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("log_directory %q log_path %q: got %v, want InvalidArgument", tc.dir, tc.path, err)
		}
	}
	list, _ := fake.ListContainers(ctx, container.ListOptions{All: true})
	if len(list) != 2 { // the sandbox and the container without a log
		t.Errorf("%d containers, want 2: a refused request created one", len(list))
	}
}

func TestReservedLabelKeysAreRefused(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	for _, key := range []string{logLabel, containerLogPathLabel, containerTypeLabel, sandboxIDLabel, handlerLabel, criKeysLabel, imagevolume.Label, "io.cri-dockerd.anything", "annotation.x", ""} {
		cfg := containerConfig("c")
		cfg.Labels = map[string]string{key: "cri", "app": "x"}
		_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) && key != "" {
			t.Errorf("container label %q: got %v, want InvalidArgument naming the key", key, err)
		}
		sb := sandboxConfig("q")
		sb.Labels = map[string]string{key: "x"}
		_, err = s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sb})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("pod label %q: got %v, want InvalidArgument", key, err)
		}
	}
	// Annotations live under their own prefix: ours (the shm size) and any other key are fine.
	cfg := containerConfig("c")
	cfg.Annotations = map[string]string{logLabel: "cri", containerLogPathLabel: "/tmp/x"}
	cfg.LogPath = ""
	resp, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := fake.InspectContainer(ctx, resp.ContainerId)
	if c.Config.Labels[logLabel] != "" || c.Config.Labels[containerLogPathLabel] != "" {
		t.Errorf("annotations reached internal labels: %v", c.Config.Labels)
	}
	st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: resp.ContainerId})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.LogPath != "" || st.Status.Annotations[containerLogPathLabel] != "/tmp/x" {
		t.Errorf("log path %q, annotations %v", st.Status.LogPath, st.Status.Annotations)
	}
}

func TestMakeLabelsDropsReservedKeys(t *testing.T) {
	out := makeLabels(map[string]string{logLabel: "cri", containerLogPathLabel: "/tmp/x", "annotation.a": "1", "app": "x"}, nil)
	for _, k := range []string{logLabel, containerLogPathLabel, "annotation.a"} {
		if _, ok := out[k]; ok {
			t.Errorf("makeLabels kept %q", k)
		}
	}
	if labels, _ := splitLabels(out); len(labels) != 1 || labels["app"] != "x" {
		t.Errorf("round trip: %v", labels)
	}
}

func TestCreateContainerFailsWhenTheLogDirectoryIsMissing(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	s.logDirectoryExists = nil // the real check
	podID, podCfg := runPod(t, s, "p", "")
	parent := t.TempDir()
	podCfg.LogDirectory = filepath.Join(parent, "missing", "ns_p")
	_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("c"), SandboxConfig: podCfg})
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("error %v does not say the directory is missing", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "missing")); !os.IsNotExist(err) {
		t.Errorf("the log directory's parent was created (%v)", err)
	}
	// A directory that exists: the follower creates the container's directory in it, and the file.
	podCfg.LogDirectory = t.TempDir()
	t.Cleanup(s.Close) // runs before the directory's removal: the follower stops writing into it
	id := createContainer(t, s, podID, podCfg, "c")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(podCfg.LogDirectory, "c", "0.log")); err != nil {
		t.Errorf("log file: %v", err)
	}
}

// Containers of upstream cri-dockerd (its labels and names, no key list) stay CRI containers:
// a node that swapped binaries stops and removes them.
func TestContainerRPCsActOnUpstreamContainers(t *testing.T) {
	ctx := context.Background()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, _ := runPod(t, s, "p", "")
	id, err := fake.CreateContainer(ctx, "k8s_app_p_ns_uid-p_0", &container.Config{Image: testImage, Labels: map[string]string{
		containerTypeLabel: containerTypeContainer, sandboxIDLabel: podID, "io.kubernetes.container.name": "app",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id[:12]}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if c, _ := fake.InspectContainer(ctx, id); c.State.Running {
		t.Errorf("still running after StopContainer")
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := fake.InspectContainer(ctx, id); !libdocker.IsNotFound(err) {
		t.Errorf("still there after RemoveContainer: %v", err)
	}
}
