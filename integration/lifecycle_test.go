//go:build integration

package integration

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

func TestContainerLifecycle(t *testing.T) {
	d := StartDaemon(t)
	img, err := d.Images.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
	if err != nil || img.Image == nil {
		t.Fatalf("ImageStatus(%s) = %v, %v", busyboxImage, img, err)
	}
	podCfg := newPodConfig(t, "lifecycle")
	sandboxID := runPod(t, d, podCfg, "")

	pst, err := d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil || pst.Status.GetNetwork().GetIp() == "" || !maps.Equal(pst.Status.Labels, podCfg.Labels) {
		t.Errorf("PodSandboxStatus = %v, %v; want a pod IP and the pod's labels", pst.GetStatus(), err)
	}

	cfg := containerConfig("app", "echo hello; "+sleeper)
	cfg.Metadata.Attempt = 3
	cfg.Labels = map[string]string{"app": "web", "io.kubernetes.pod.name": podCfg.Metadata.Name, "empty": ""}
	cfg.Annotations = map[string]string{"kubernetes.io/config.source": "api", "json": `{"a": [1, "b"]}`, "empty": ""}
	before := time.Now()
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	ctrStatus := func() *runtimeapi.ContainerStatus {
		t.Helper()
		resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		return resp.Status
	}
	if st := ctrStatus(); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.StartedAt != 0 {
		t.Errorf("after create: state %v started_at %d, want CONTAINER_CREATED and 0", st.State, st.StartedAt)
	}

	startContainer(t, d, ctrID)
	st := ctrStatus()
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("state = %v, want CONTAINER_RUNNING", st.State)
	}
	if started := time.Unix(0, st.StartedAt); started.Before(before.Add(-time.Second)) || started.After(time.Now().Add(time.Second)) {
		t.Errorf("started_at = %v, want between %v and now", started, before)
	}
	if st.Id != ctrID || st.Metadata.GetName() != "app" || st.Metadata.GetAttempt() != 3 {
		t.Errorf("id %q metadata %v, want %q app/3", st.Id, st.Metadata, ctrID)
	}
	// As upstream: docker-pullable:// and the first repo digest Docker reports, else docker://ID.
	// The setup loads busybox: no repo digest on 20.10; the containerd store gives a loaded
	// image one of its own (its manifest digest).
	wantRef := "docker://" + img.Image.Id
	if inspected, err := suite.docker.ImageInspect(t.Context(), img.Image.Id); err == nil && len(inspected.RepoDigests) > 0 {
		wantRef = "docker-pullable://" + inspected.RepoDigests[0]
	}
	if st.ImageId != img.Image.Id || st.ImageRef != wantRef {
		t.Errorf("image_id %q image_ref %q, want ImageStatus id %q and %q", st.ImageId, st.ImageRef, img.Image.Id, wantRef)
	}
	if st.Image.GetImage() != busyboxImage {
		t.Errorf("image = %q, want %q", st.Image.GetImage(), busyboxImage)
	}
	if !maps.Equal(st.Labels, cfg.Labels) {
		t.Errorf("labels = %v, want exactly %v", st.Labels, cfg.Labels)
	}
	if !maps.Equal(st.Annotations, cfg.Annotations) {
		t.Errorf("annotations = %v, want exactly %v", st.Annotations, cfg.Annotations)
	}
	if want := filepath.Join(podCfg.LogDirectory, cfg.LogPath); st.LogPath != want {
		t.Errorf("log_path = %q, want %q", st.LogPath, want)
	}

	list, err := d.Runtime.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: ctrID}})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("ListContainers(id) = %v, %v; want one", list, err)
	}
	if c := list.Containers[0]; c.PodSandboxId != sandboxID || c.ImageId != img.Image.Id || !maps.Equal(c.Labels, cfg.Labels) || !maps.Equal(c.Annotations, cfg.Annotations) {
		t.Errorf("ListContainers item = %v; want sandbox %s, image %s and the labels and annotations given", c, sandboxID, img.Image.Id)
	}

	if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 1}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if st := ctrStatus(); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.FinishedAt < st.StartedAt || st.Reason == "" {
		t.Errorf("after stop: state %v finished_at %d reason %q, want CONTAINER_EXITED, finished after start, a reason", st.State, st.FinishedAt, st.Reason)
	}
	if _, err := d.Runtime.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	_, err = d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
	wantCode(t, err, codes.NotFound)

	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := d.Runtime.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	_, err = d.Runtime.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	wantCode(t, err, codes.NotFound)
	if left := podContainers(t, podCfg.Metadata); len(left) != 0 {
		t.Errorf("RemovePodSandbox left %d Docker containers", len(left))
	}
}

// The kubelet (kubectl logs, crictl logs) reads a container's output from its log_path.
func TestContainerOutputIsReadableAtLogPath(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "logs")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", "echo hello-from-app; "+sleeper))
	startContainer(t, d, ctrID)
	path := filepath.Join(podCfg.LogDirectory, "app.log")
	var content []byte
	var err error
	if testutil.PollUntil(5*time.Second, 100*time.Millisecond, func() bool {
		content, err = os.ReadFile(path)
		return err == nil && strings.Contains(string(content), "hello-from-app")
	}) {
		return
	}
	t.Errorf("log_path %s: %v, content %q; want the container's output", path, err, content)
}

func TestStopContainerHonoursTimeout(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "stoptimeout")
	sandboxID := runPod(t, d, podCfg, "")
	// Ignores SIGTERM: only the SIGKILL after the timeout ends it.
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("stubborn", `trap "" TERM; sleep 1000`))
	startContainer(t, d, ctrID)
	start := time.Now()
	if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 2}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	// At least the timeout (the SIGKILL comes after it); the upper bound, scaled with the load,
	// only catches a stop that ignored it.
	if took := time.Since(start); took < 1500*time.Millisecond || took > testutil.Scaled(10*time.Second) {
		t.Errorf("StopContainer with timeout 2 s took %v, want about 2 s", took)
	}
	st, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 137 {
		t.Errorf("after stop: %v, %v; want CONTAINER_EXITED with exit code 137 (killed)", st.GetStatus(), err)
	}
}

func TestListFiltersSelectExactly(t *testing.T) {
	d := StartDaemon(t)
	run := "run-" + randHex() // scopes label selectors to this test: other pods may exist
	podA, podB := newPodConfig(t, "lista"), newPodConfig(t, "listb")
	podA.Labels["crid-it-run"], podB.Labels["crid-it-run"] = run, run
	sandboxA, sandboxB := runPod(t, d, podA, ""), runPod(t, d, podB, "")
	mk := func(sandboxID string, pod *runtimeapi.PodSandboxConfig, name, tier string) string {
		cfg := containerConfig(name, sleeper)
		cfg.Labels = map[string]string{"crid-it-run": run, "tier": tier}
		return createContainer(t, d, sandboxID, pod, cfg)
	}
	running, created, other := mk(sandboxA, podA, "running", "front"), mk(sandboxA, podA, "created", "back"), mk(sandboxB, podB, "other", "front")
	startContainer(t, d, running)
	startContainer(t, d, other)
	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxB}); err != nil {
		t.Fatal(err)
	}

	state := func(s runtimeapi.ContainerState) *runtimeapi.ContainerStateValue {
		return &runtimeapi.ContainerStateValue{State: s}
	}
	sel := func(kv ...string) map[string]string {
		m := map[string]string{"crid-it-run": run}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"id", &runtimeapi.ContainerFilter{Id: created}, []string{created}},
		{"id prefix", &runtimeapi.ContainerFilter{Id: running[:13]}, []string{running}},
		{"pod", &runtimeapi.ContainerFilter{PodSandboxId: sandboxA}, []string{running, created}},
		{"pod and running", &runtimeapi.ContainerFilter{PodSandboxId: sandboxA, State: state(runtimeapi.ContainerState_CONTAINER_RUNNING)}, []string{running}},
		{"created", &runtimeapi.ContainerFilter{State: state(runtimeapi.ContainerState_CONTAINER_CREATED), LabelSelector: sel()}, []string{created}},
		{"exited", &runtimeapi.ContainerFilter{State: state(runtimeapi.ContainerState_CONTAINER_EXITED), LabelSelector: sel()}, []string{other}},
		{"label", &runtimeapi.ContainerFilter{LabelSelector: sel("tier", "front")}, []string{running, other}},
		{"label and pod", &runtimeapi.ContainerFilter{LabelSelector: sel("tier", "front"), PodSandboxId: sandboxB}, []string{other}},
		{"label matches none", &runtimeapi.ContainerFilter{LabelSelector: sel("tier", "none")}, nil},
		{"id of another pod", &runtimeapi.ContainerFilter{Id: other, PodSandboxId: sandboxA}, nil},
	} {
		resp, err := d.Runtime.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: tc.filter})
		if err != nil {
			t.Errorf("ListContainers %s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, c := range resp.Containers {
			got = append(got, c.Id)
		}
		if !sameIDs(got, tc.want) {
			t.Errorf("ListContainers %s: got %s, want %s", tc.name, short(got), short(tc.want))
		}
	}

	podState := func(s runtimeapi.PodSandboxState) *runtimeapi.PodSandboxStateValue {
		return &runtimeapi.PodSandboxStateValue{State: s}
	}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"id", &runtimeapi.PodSandboxFilter{Id: sandboxA}, []string{sandboxA}},
		{"id prefix", &runtimeapi.PodSandboxFilter{Id: sandboxB[:13]}, []string{sandboxB}},
		{"label", &runtimeapi.PodSandboxFilter{LabelSelector: sel()}, []string{sandboxA, sandboxB}},
		{"label of one pod", &runtimeapi.PodSandboxFilter{LabelSelector: sel("crid-it-pod", podB.Metadata.Name)}, []string{sandboxB}},
		{"ready", &runtimeapi.PodSandboxFilter{State: podState(runtimeapi.PodSandboxState_SANDBOX_READY), LabelSelector: sel()}, []string{sandboxA}},
		{"not ready", &runtimeapi.PodSandboxFilter{State: podState(runtimeapi.PodSandboxState_SANDBOX_NOTREADY), LabelSelector: sel()}, []string{sandboxB}},
		{"id and other state", &runtimeapi.PodSandboxFilter{Id: sandboxA, State: podState(runtimeapi.PodSandboxState_SANDBOX_NOTREADY)}, nil},
	} {
		resp, err := d.Runtime.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
		if err != nil {
			t.Errorf("ListPodSandbox %s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, s := range resp.Items {
			got = append(got, s.Id)
		}
		if !sameIDs(got, tc.want) {
			t.Errorf("ListPodSandbox %s: got %s, want %s", tc.name, short(got), short(tc.want))
		}
	}
}

func sameIDs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func short(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id[:min(12, len(id))]
	}
	return "[" + strings.Join(out, " ") + "]"
}
