//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI 1.37 fields on a real Docker: stop_signal is what StopContainer sends, the status
// reports it and the user the first process runs with; mount_options and an unknown image
// runtime_handler are refused before Docker creates anything.
func TestCRIFieldsOnDocker(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "crifields")
	sandboxID := runPod(t, d, podCfg, "")

	// Only SIGUSR1 ends it at once with 0: SIGTERM is ignored by a shell as PID 1, so a stop
	// with Docker's default signal would wait out the timeout and kill (137).
	cfg := containerConfig("usr1", `trap "echo got-usr1; exit 0" USR1; echo ready; while true; do sleep 0.1; done`)
	cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
	sc := cfg.Linux.SecurityContext
	sc.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
	sc.RunAsGroup = &runtimeapi.Int64Value{Value: 3000}
	sc.SupplementalGroups = []int64{5000}
	id := createContainer(t, d, sandboxID, podCfg, cfg)
	startContainer(t, d, id)
	status := func() *runtimeapi.ContainerStatus {
		t.Helper()
		resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	wantUser := func(when string, st *runtimeapi.ContainerStatus) {
		t.Helper()
		u := st.GetUser().GetLinux()
		if u == nil || u.Uid != 1000 || u.Gid != 3000 || !slices.Contains(u.SupplementalGroups, 5000) {
			t.Errorf("%s: user %v, want uid 1000, gid 3000 and group 5000", when, u)
		}
	}
	st := status()
	if st.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR1 {
		t.Errorf("running: stop_signal %v, want SIGUSR1", st.StopSignal)
	}
	wantUser("running", st)
	if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 60}); err != nil {
		t.Fatal(err)
	}
	st = waitExited(t, d, id)
	if st.ExitCode != 0 {
		t.Errorf("stopped: exit code %d, want 0 (the trap of SIGUSR1)", st.ExitCode)
	}
	if log, err := os.ReadFile(st.LogPath); err != nil || !strings.Contains(string(log), "got-usr1") {
		t.Errorf("log %q (%v): the container never got SIGUSR1", log, err)
	}
	wantUser("exited", st)

	// Without a stop signal: Docker's default, SIGTERM.
	plain := createContainer(t, d, sandboxID, podCfg, containerConfig("plain", sleeper))
	resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: plain})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.StopSignal != runtimeapi.Signal_SIGNAL_SIGTERM {
		t.Errorf("no stop signal given: stop_signal %v, want SIGTERM", resp.Status.StopSignal)
	}

	before := len(podContainers(t, podCfg.Metadata))
	opts := containerConfig("noexec", sleeper)
	opts.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: "/data", MountOptions: []string{"noexec"}}}
	_, err = d.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: opts, SandboxConfig: podCfg})
	wantCode(t, err, codes.InvalidArgument, `"noexec"`, "/data")
	if after := len(podContainers(t, podCfg.Metadata)); after != before {
		t.Errorf("a refused mount option left %d containers", after-before)
	}

	_, err = d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage, RuntimeHandler: "crid-no-such-handler"}})
	wantCode(t, err, codes.InvalidArgument, `"crid-no-such-handler"`)
	img, err := d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage, RuntimeHandler: "runc"}})
	if err != nil || img.Image == nil {
		t.Errorf("ImageStatus with handler runc: %v, %v", img, err)
	}
}

// Status's recursive read-only support per handler follows the OCI features Docker reports for
// each runtime (Docker 25+): a runtime listing "rro" has it whatever its name (the test's
// runc wrapper), and one reporting none is judged by name (gVisor: no).
func TestRecursiveReadOnlyFollowsDockersRuntimeFeatures(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	info, err := suite.docker.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Runtime.Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range st.RuntimeHandlers {
		got[h.Name] = h.Features.GetRecursiveReadOnlyMounts()
	}
	withFeatures := 0
	for name, rt := range info.Runtimes {
		raw := rt.Status["org.opencontainers.runtime-spec.features"]
		if raw == "" {
			if strings.HasPrefix(filepath.Base(rt.Path), "runsc") && got[name] {
				t.Errorf("handler %q (gVisor, no OCI features) reports recursive read-only mounts", name)
			}
			continue
		}
		withFeatures++
		var features struct {
			MountOptions []string `json:"mountOptions"`
		}
		if err := json.Unmarshal([]byte(raw), &features); err != nil {
			t.Fatalf("runtime %q's features: %v", name, err)
		}
		if want := slices.Contains(features.MountOptions, "rro"); got[name] != want {
			t.Errorf("handler %q: recursive read-only %v, but Docker's features of it list rro: %v", name, got[name], want)
		}
	}
	t.Logf("Docker %s: %d of %d runtimes report OCI features; handlers: %v", info.ServerVersion, withFeatures, len(info.Runtimes), got)
	if withFeatures == 0 {
		for name, rro := range got {
			if rro && name != "" && name != "runc" && name != "io.containerd.runc.v2" && name != info.DefaultRuntime {
				t.Errorf("handler %q reports recursive read-only mounts with no OCI features from Docker", name)
			}
		}
	}
}

// Neither engine of the suite runs Docker's experimental checkpoints: CheckpointContainer says
// what is needed, and writes nothing, even where the kubelet's directory is.
func TestCheckpointContainerSaysWhatDockerLacks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, "--network-plugin=", "--checkpoint-directory="+dir)
	podCfg := newPodConfig(t, "checkpoint")
	sandboxID := runPod(t, d, podCfg, "")
	id := createContainer(t, d, sandboxID, podCfg, containerConfig("app", sleeper))
	startContainer(t, d, id)
	_, err := d.Runtime.CheckpointContainer(t.Context(), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "app.tar")})
	wantCode(t, err, codes.Unimplemented, `"experimental": true`, "criu")
	_, err = d.Runtime.CheckpointContainer(t.Context(), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "/etc/crid-checkpoint.tar"})
	wantCode(t, err, codes.InvalidArgument, dir)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("written into %s: %v", dir, entries)
	}
	if _, err := os.Stat("/etc/crid-checkpoint.tar"); err == nil {
		t.Error("wrote /etc/crid-checkpoint.tar")
	}
}

// PodSandboxStatus for the kubelet's Evented PLEG: every container of the pod, as
// ContainerStatus gives it, and the time they were read from.
func TestPodSandboxStatusCarriesItsContainers(t *testing.T) {
	d := StartDaemon(t, "--network-plugin=")
	podCfg := newPodConfig(t, "evented")
	sandboxID := runPod(t, d, podCfg, "")
	running := createContainer(t, d, sandboxID, podCfg, containerConfig("running", sleeper))
	startContainer(t, d, running)
	done := createContainer(t, d, sandboxID, podCfg, containerConfig("done", "exit 3"))
	startContainer(t, d, done)
	waitExited(t, d, done)
	created := createContainer(t, d, sandboxID, podCfg, containerConfig("created", sleeper))
	before := time.Now().UnixNano()
	resp, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Timestamp < before || resp.Timestamp > time.Now().UnixNano() {
		t.Errorf("timestamp %d not taken during the call (from %d)", resp.Timestamp, before)
	}
	want := map[string]runtimeapi.ContainerState{
		running: runtimeapi.ContainerState_CONTAINER_RUNNING,
		done:    runtimeapi.ContainerState_CONTAINER_EXITED,
		created: runtimeapi.ContainerState_CONTAINER_CREATED,
	}
	if len(resp.ContainersStatuses) != len(want) {
		t.Fatalf("%d container statuses, want %d: %v", len(resp.ContainersStatuses), len(want), resp.ContainersStatuses)
	}
	for _, st := range resp.ContainersStatuses {
		if w, ok := want[st.Id]; !ok || st.State != w || st.Metadata.GetName() == "" {
			t.Errorf("status %.12s %v %q, want %v", st.Id, st.State, st.Metadata.GetName(), w)
		}
		if st.Id == done && st.ExitCode != 3 {
			t.Errorf("exited container's exit code %d, want 3", st.ExitCode)
		}
	}
}
