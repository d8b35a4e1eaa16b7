package core

import (
	"context"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestLabelsAndAnnotationsRoundTripExactly(t *testing.T) {
	fake := libdocker.NewFake()
	img := libdocker.FakeImage("", "", testImage)
	img.Config.Labels = map[string]string{"org.opencontainers.image.source": "https://example.com", "tier": "image-value"}
	fake.AddImage(img)
	pause := libdocker.FakeImage("", "", testPauseImage)
	pause.Config.Labels = map[string]string{"maintainer": "pause"}
	fake.AddImage(pause)
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	want := containerConfig("c")

	ps, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(ps.Status.Labels, podCfg.Labels) || !maps.Equal(ps.Status.Annotations, podCfg.Annotations) {
		t.Errorf("sandbox labels %v annotations %v, want %v %v", ps.Status.Labels, ps.Status.Annotations, podCfg.Labels, podCfg.Annotations)
	}
	if m := ps.Status.Metadata; m.Name != "p" || m.Namespace != "ns" || m.Uid != "uid-p" || m.Attempt != 1 {
		t.Errorf("sandbox metadata %v", m)
	}
	cs, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(cs.Status.Labels, want.Labels) || !maps.Equal(cs.Status.Annotations, want.Annotations) {
		t.Errorf("container labels %v annotations %v, want %v %v", cs.Status.Labels, cs.Status.Annotations, want.Labels, want.Annotations)
	}
	list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("ListContainers = %v, %v", list, err)
	}
	if got := list.Containers[0]; !maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Annotations, want.Annotations) || got.PodSandboxId != podID {
		t.Errorf("listed container %v", got)
	}
	// Docker lists seconds; the list's created_at is in nanoseconds, as the status's.
	if d := cs.Status.CreatedAt - list.Containers[0].CreatedAt; d < 0 || d >= int64(time.Second) {
		t.Errorf("listed created_at %d, want the status's %d to the second", list.Containers[0].CreatedAt, cs.Status.CreatedAt)
	}
	pods, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 1 || !maps.Equal(pods.Items[0].Labels, podCfg.Labels) {
		t.Errorf("ListPodSandbox = %v, %v", pods, err)
	}
	if cs.Status.LogPath != filepath.Join(testLogRoot, "ns_p", "c/0.log") {
		t.Errorf("log path %q", cs.Status.LogPath)
	}
}

func TestUpstreamCreatedObjectsAreListedAndRemovable(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	// What upstream cri-dockerd leaves on a node: its names and labels, none of ours.
	sandboxID, err := fake.CreateContainer(ctx, "k8s_POD_web_default_1234_0", ptr(containerCfgForTest{}.sandbox()), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrID, err := fake.CreateContainer(ctx, "k8s_nginx_web_default_1234_3", ptr(containerCfgForTest{}.container(sandboxID)), nil)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v", pods, err)
	}
	if m := pods.Items[0].Metadata; m.Name != "web" || m.Namespace != "default" || m.Uid != "1234" {
		t.Errorf("metadata %v", m)
	}
	if got := pods.Items[0].Annotations["kubernetes.io/config.source"]; got != "api" {
		t.Errorf("annotation from upstream's annotation. label: %q", got)
	}
	ctrs, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID}})
	if err != nil || len(ctrs.Containers) != 1 || ctrs.Containers[0].Metadata.Name != "nginx" || ctrs.Containers[0].Metadata.Attempt != 3 {
		t.Fatalf("ListContainers = %v, %v", ctrs, err)
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left after RemovePodSandbox (container %s)", n, ctrID[:12])
	}
}

// Objects made by upstream cri-dockerd carry no key list: every label but the internal ones
// (container type, sandbox ID, log path) is a CRI label, and annotation.* an annotation. Each
// RPC that reports them gives exactly the pod's and the container's own.
func TestUpstreamObjectsReportExactlyTheirCRILabels(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	// The labels upstream's CreatePodSandbox and CreateContainer write (dockershim's makeLabels).
	sandboxID, err := fake.CreateContainer(ctx, "k8s_POD_web_default_1234_0", &container.Config{Image: testPauseImage, Labels: map[string]string{
		containerTypeLabel: containerTypeSandbox, "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default",
		"io.kubernetes.pod.uid": "1234", "app": "web", "annotation.kubernetes.io/config.source": "api",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrID, err := fake.CreateContainer(ctx, "k8s_nginx_web_default_1234_3", &container.Config{Image: testImage, Labels: map[string]string{
		containerTypeLabel: containerTypeContainer, sandboxIDLabel: sandboxID, containerLogPathLabel: "/var/log/pods/default_web_1234/nginx/3.log",
		"io.kubernetes.container.name": "nginx", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "1234",
		"annotation.io.kubernetes.container.hash": "7c1d2a", "annotation.io.kubernetes.container.restartCount": "3",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPodLabels := map[string]string{"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "1234", "app": "web"}
	wantPodAnnotations := map[string]string{"kubernetes.io/config.source": "api"}
	wantLabels := map[string]string{"io.kubernetes.container.name": "nginx", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "1234"}
	wantAnnotations := map[string]string{"io.kubernetes.container.hash": "7c1d2a", "io.kubernetes.container.restartCount": "3"}
	check := func(what string, labels, annotations, wantL, wantA map[string]string) {
		t.Helper()
		if !maps.Equal(labels, wantL) {
			t.Errorf("%s labels = %v, want exactly %v", what, labels, wantL)
		}
		if !maps.Equal(annotations, wantA) {
			t.Errorf("%s annotations = %v, want exactly %v", what, annotations, wantA)
		}
	}
	pst, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	check("PodSandboxStatus", pst.Status.Labels, pst.Status.Annotations, wantPodLabels, wantPodAnnotations)
	pods, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v", pods, err)
	}
	check("ListPodSandbox", pods.Items[0].Labels, pods.Items[0].Annotations, wantPodLabels, wantPodAnnotations)
	cst, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatal(err)
	}
	check("ContainerStatus", cst.Status.Labels, cst.Status.Annotations, wantLabels, wantAnnotations)
	ctrs, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(ctrs.Containers) != 1 {
		t.Fatalf("ListContainers = %v, %v", ctrs, err)
	}
	check("ListContainers", ctrs.Containers[0].Labels, ctrs.Containers[0].Annotations, wantLabels, wantAnnotations)
	// A label selector on an internal key matches nothing: it is not a CRI label.
	sel, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{sandboxIDLabel: sandboxID}}})
	if err != nil || len(sel.Containers) != 0 {
		t.Errorf("ListContainers selecting %s = %v, %v; want none", sandboxIDLabel, sel, err)
	}
}

type containerCfgForTest struct{}

func (containerCfgForTest) sandbox() container.Config {
	return container.Config{Image: testPauseImage, Labels: map[string]string{
		containerTypeLabel: containerTypeSandbox, "io.kubernetes.pod.name": "web", "annotation.kubernetes.io/config.source": "api"}}
}

func (containerCfgForTest) container(sandboxID string) container.Config {
	return container.Config{Image: testImage, Labels: map[string]string{
		containerTypeLabel: containerTypeContainer, sandboxIDLabel: sandboxID, "io.kubernetes.container.name": "nginx"}}
}

func TestContainerLifecycleStates(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	state := func() *runtimeapi.ContainerStatus {
		t.Helper()
		resp, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	if st := state(); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 || st.StartedAt != 0 {
		t.Errorf("after create: %v", st)
	}
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	st := state()
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
		t.Errorf("after start: %v", st)
	}
	img, _ := fake.InspectImage(ctx, testImage)
	if st.ImageId != img.ID || st.ImageRef != "docker://"+img.ID || st.Image.Image != testImage {
		t.Errorf("image %v ref %q id %q, want %q, docker://%s and %[5]s", st.Image, st.ImageRef, st.ImageId, testImage, img.ID)
	}
	if err := fake.SetStopExitCode(id, 137); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if st := state(); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 || st.Reason != "Error" || st.FinishedAt == 0 {
		t.Errorf("after stop: %v", st)
	}
	running := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	if l, _ := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: running}}); len(l.Containers) != 0 {
		t.Errorf("state filter listed %d running containers", len(l.Containers))
	}
	for i := 0; i < 2; i++ {
		if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	wantCode(t, err, codes.NotFound)
}

func TestListFilters(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	pod1, cfg1 := runPod(t, s, "one", "")
	pod2, cfg2 := runPod(t, s, "two", "")
	c1 := createContainer(t, s, pod1, cfg1, "a")
	createContainer(t, s, pod2, cfg2, "b")
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod2}); err != nil {
		t.Fatal(err)
	}
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"all", nil, []string{pod1, pod2}},
		{"id", &runtimeapi.PodSandboxFilter{Id: pod2}, []string{pod2}},
		{"id prefix", &runtimeapi.PodSandboxFilter{Id: pod1[:12]}, []string{pod1}},
		{"state", &runtimeapi.PodSandboxFilter{State: ready}, []string{pod1}},
		{"labels", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "two"}}, []string{pod2}},
		{"labels no match", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "three"}}, nil},
	} {
		resp, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range resp.Items {
			got = append(got, p.Id)
		}
		if !sameSet(got, tc.want) {
			t.Errorf("%s: got %d pods, want %d", tc.name, len(got), len(tc.want))
		}
	}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   int
	}{
		{"pod", &runtimeapi.ContainerFilter{PodSandboxId: pod1}, 1},
		{"id", &runtimeapi.ContainerFilter{Id: c1}, 1},
		{"labels", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "b"}}, 1},
		{"state created", &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}, 2},
		{"unknown pod", &runtimeapi.ContainerFilter{PodSandboxId: "nope"}, 0},
	} {
		resp, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Containers) != tc.want {
			t.Errorf("%s: got %d containers, want %d", tc.name, len(resp.Containers), tc.want)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

func TestSandboxOOMScoreClampedWhereNegativeIsRefused(t *testing.T) {
	fake := libdocker.NewFake()
	fake.SetSecurityOptions("name=seccomp,profile=default", "name=rootless")
	s := newTestService(t, fake, Options{})
	if !s.clampOOMScore {
		t.Fatal("rootless Docker not detected")
	}
	podID, podCfg := runPod(t, s, "p", "")
	c, _ := fake.InspectContainer(context.Background(), podID)
	if c.HostConfig.OomScoreAdj != 0 {
		t.Errorf("sandbox oom_score_adj %d on rootless Docker, want 0", c.HostConfig.OomScoreAdj)
	}
	cfg := containerConfig("g")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{OomScoreAdj: -997}}
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ = fake.InspectContainer(context.Background(), resp.ContainerId)
	if c.HostConfig.OomScoreAdj != 0 {
		t.Errorf("Guaranteed container oom_score_adj %d, want 0", c.HostConfig.OomScoreAdj)
	}
	s.clampOOMScore = false
	if got := s.oomScoreAdj(sandboxOOMScoreAdj); got != -998 {
		t.Errorf("unclamped sandbox oom score %d, want -998 as dockershim", got)
	}
}

func ptr[T any](v T) *T { return &v }
