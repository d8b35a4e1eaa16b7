//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A sandbox ID and a container made with `docker run` given to each container RPC get NotFound
// and are left as they were: a container RPC acts only on the containers cri-dockerd created.
func TestContainerRPCsLeaveSandboxesAndDockerContainersAlone(t *testing.T) {
	d := StartDaemon(t)
	ctx := t.Context()
	podCfg := newPodConfig(t, "trust")
	sandboxID := runPod(t, d, podCfg, "")
	name := "crid-it-foreign-" + randHex()
	c, err := suite.docker.ContainerCreate(ctx, &container.Config{Image: busyboxImage, Cmd: []string{"sh", "-c", sleeper}}, nil, nil, nil, name)
	if err != nil {
		t.Fatalf("docker create: %v", err)
	}
	foreign := c.ID
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = suite.docker.ContainerRemove(cctx, foreign, container.RemoveOptions{Force: true})
	})
	if err := suite.docker.ContainerStart(ctx, foreign, container.StartOptions{}); err != nil {
		t.Fatalf("docker start: %v", err)
	}
	for what, id := range map[string]string{"sandbox": sandboxID, "docker run container": foreign} {
		for rpc, call := range map[string]func() error{
			"StartContainer":           rpc(ctx, d.Runtime.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}),
			"StopContainer":            rpc(ctx, d.Runtime.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: id}),
			"RemoveContainer":          rpc(ctx, d.Runtime.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id}),
			"UpdateContainerResources": rpc(ctx, d.Runtime.UpdateContainerResources, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}),
			"ExecSync":                 rpc(ctx, d.Runtime.ExecSync, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"touch", "/exec-ran"}}),
			"Exec":                     rpc(ctx, d.Runtime.Exec, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"touch", "/exec-ran"}, Stdout: true}),
			"Attach":                   rpc(ctx, d.Runtime.Attach, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true}),
			"ReopenContainerLog":       rpc(ctx, d.Runtime.ReopenContainerLog, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}),
			"ContainerStatus":          rpc(ctx, d.Runtime.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id}),
			"ContainerStats":           rpc(ctx, d.Runtime.ContainerStats, &runtimeapi.ContainerStatsRequest{ContainerId: id}),
		} {
			t.Run(what+"/"+rpc, func(t *testing.T) { wantCode(t, call(), codes.NotFound) })
		}
	}
	// The docker run container is no sandbox either: stop and removal of it as a sandbox answer
	// NotFound and touch nothing (checked below); of an ID Docker does not have, they succeed
	// (the CRI's idempotence).
	for rpc, call := range map[string]func() error{
		"StopPodSandbox":   rpc(ctx, d.Runtime.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: foreign}),
		"RemovePodSandbox": rpc(ctx, d.Runtime.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: foreign}),
	} {
		t.Run("docker run container/"+rpc, func(t *testing.T) { wantCode(t, call(), codes.NotFound) })
	}
	if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "0123456789abcdef"}); err != nil {
		t.Errorf("RemovePodSandbox of an ID Docker does not have: %v, want success", err)
	}
	wantCode(t, rpc(ctx, d.Runtime.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: foreign})(), codes.NotFound)
	for _, id := range []string{sandboxID, foreign} {
		c, err := suite.docker.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatalf("%s is gone: %v", id, err)
		}
		if !c.State.Running {
			t.Errorf("%s was stopped: %s", id, c.State.Status)
		}
		if c.HostConfig.CPUShares != 0 {
			t.Errorf("%s was updated: cpu shares %d", id, c.HostConfig.CPUShares)
		}
	}
	if _, err := suite.docker.ContainerStatPath(ctx, foreign, "/exec-ran"); err == nil {
		t.Errorf("an exec ran in the docker run container")
	}
}

// Labels that name our log mode and log path, with no log_path, do not send the container's
// output anywhere: only the kubelet's log_path says where output goes; a log_path that leaves
// the log directory creates nothing.
func TestRequestsCannotChooseWhereOutputGoes(t *testing.T) {
	d := StartDaemon(t)
	ctx := t.Context()
	podCfg := newPodConfig(t, "logpath")
	sandboxID := runPod(t, d, podCfg, "")
	target := filepath.Join(t.TempDir(), "x")

	cfg := containerConfig("labels", "echo leaked; "+sleeper)
	cfg.LogPath = ""
	cfg.Labels = map[string]string{"io.cri-dockerd.log": "cri", "io.kubernetes.container.logpath": target}
	resp, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
	wantCode(t, err, codes.InvalidArgument, "io.cri-dockerd.log")
	if err == nil { // run it, to see where its output goes
		startContainer(t, d, resp.ContainerId)
	}

	// The same keys as annotations are kept as annotations and steer nothing.
	cfg.Labels, cfg.Annotations = nil, map[string]string{"io.cri-dockerd.log": "cri", "io.kubernetes.container.logpath": target}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id)
	st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.LogPath != "" {
		t.Errorf("log_path %q, want none", st.Status.LogPath)
	}

	outside := t.TempDir()
	for _, path := range []string{"../" + filepath.Base(outside) + "/y.log", outside + "/y.log", "."} {
		cfg := containerConfig("escape", "echo leaked; "+sleeper)
		cfg.LogPath = path
		resp, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: podCfg})
		wantCode(t, err, codes.InvalidArgument, "log_path")
		if err == nil {
			startContainer(t, d, resp.ContainerId)
		}
	}
	// A log directory that is not there: refused, and neither it nor its parent is created.
	missing := proto.Clone(podCfg).(*runtimeapi.PodSandboxConfig)
	missing.LogDirectory = filepath.Join(outside, "no", "pod")
	_, err = d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: containerConfig("nodir", sleeper), SandboxConfig: missing})
	wantCode(t, err, codes.FailedPrecondition, "does not exist")
	if _, err := os.Stat(filepath.Join(outside, "no")); !os.IsNotExist(err) {
		t.Errorf("the log directory's parent was created (%v)", err)
	}
	time.Sleep(time.Second) // what the container printed would have reached a file by now
	for _, p := range []string{target, filepath.Join(outside, "y.log")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v): output went outside the log directory", p, err)
		}
	}
	if n := len(podContainers(t, podCfg.Metadata)); n != 2 {
		t.Errorf("%d containers in the pod, want 2 (the sandbox and the container with annotations)", n)
	}
}
