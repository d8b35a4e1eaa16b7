package core

import (
	"context"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestPodSandboxStatsSumsTheContainersAndTakesTheSandboxNetwork(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "pod", "")
	c1 := startedContainer(t, s, podID, podCfg, "c1")
	c2 := startedContainer(t, s, podID, podCfg, "c2")
	otherPod, otherCfg := runPod(t, s, "other", "")
	startedContainer(t, s, otherPod, otherCfg, "x")
	for _, id := range []string{podID, c1, c2} {
		if err := fake.SetStats(id, container.StatsResponse{
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 1e9}},
			MemoryStats: container.MemoryStats{Usage: 10 << 20, Stats: map[string]uint64{"total_inactive_file": 1 << 20}},
			PidsStats:   container.PidsStats{Current: 2},
			Networks:    map[string]container.NetworkStats{"eth0": {RxBytes: 42, TxBytes: 24}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Stats
	if st.Attributes.Id != podID || st.Attributes.Metadata.GetName() != "pod" || st.Attributes.Labels["app"] != "pod" {
		t.Errorf("attributes %v", st.Attributes)
	}
	l := st.Linux
	if l.Cpu.UsageCoreNanoSeconds.GetValue() != 3e9 || l.Memory.WorkingSetBytes.GetValue() != 27<<20 || l.Process.ProcessCount.GetValue() != 6 {
		t.Errorf("pod sums: cpu %v memory %v process %v", l.Cpu, l.Memory, l.Process)
	}
	if l.Network.GetDefaultInterface().GetName() != "eth0" || l.Network.DefaultInterface.RxBytes.GetValue() != 42 {
		t.Errorf("pod network %v", l.Network)
	}
	if got := statIDs(l.Containers); !slices.Equal(got, statIDs([]*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: c1}}, {Attributes: &runtimeapi.ContainerAttributes{Id: c2}}})) {
		t.Errorf("pod containers %v", got)
	}

	list, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.Stats) != 2 {
		t.Fatalf("ListPodSandboxStats = %v, %v; want both pods", list, err)
	}
	list, err = s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "other"}}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != otherPod || len(list.Stats[0].Linux.Containers) != 1 {
		t.Errorf("ListPodSandboxStats by label = %v, %v", list, err)
	}

	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: otherPod}); err != nil {
		t.Fatal(err)
	}
	_, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: otherPod})
	wantCode(t, err, codes.NotFound)
	_, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

// ListPodSandboxStats of several pods reports each pod's containers, and a pod's memory usage,
// rss and page faults are the sums of its sandbox's and its containers'.
func TestListPodSandboxStatsOfSeveralPods(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	want := map[string]string{}
	for _, name := range []string{"a", "b"} {
		podID, podCfg := runPod(t, s, name, "")
		id := startedContainer(t, s, podID, podCfg, "c")
		want[podID] = id
		for cid, usage := range map[string]uint64{podID: 1 << 20, id: 8 << 20} {
			if err := fake.SetStats(cid, container.StatsResponse{MemoryStats: container.MemoryStats{Usage: usage, Limit: 1 << 30,
				Stats: map[string]uint64{"inactive_file": 0, "anon": usage / 2, "pgfault": 10, "pgmajfault": 1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(resp.Stats) != 2 {
		t.Fatalf("ListPodSandboxStats = %v, %v; want 2 pods", resp, err)
	}
	for _, st := range resp.Stats {
		id := st.Attributes.GetId()
		l := st.GetLinux()
		if len(l.GetContainers()) != 1 || l.Containers[0].GetAttributes().GetId() != want[id] {
			t.Errorf("pod %.12s: containers %v, want %.12s", id, l.GetContainers(), want[id])
		}
		if m := l.GetMemory(); m.GetUsageBytes().GetValue() != 9<<20 || m.GetRssBytes().GetValue() != 9<<19 || m.GetPageFaults().GetValue() != 20 || m.GetMajorPageFaults().GetValue() != 2 {
			t.Errorf("pod %.12s: memory %v, want the sums of the sandbox's and the container's", id, m)
		}
	}
}

// A pod's default interface is eth0 whatever other interfaces it has (a CNI with a second
// network, a tunnel sorting before it), as the kubelet's summary expects.
func TestPodsDefaultInterfaceIsEth0AmongOthers(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	podID, _ := runPod(t, s, "nets", "")
	nets := map[string]container.NetworkStats{"a0": {RxBytes: 1}, "eth0": {RxBytes: 2}, "net1": {RxBytes: 3}}
	if err := fake.SetStats(podID, container.StatsResponse{Networks: nets}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	n := resp.Stats.GetLinux().GetNetwork()
	if n.GetDefaultInterface().GetName() != "eth0" || n.GetDefaultInterface().GetRxBytes().GetValue() != 2 || len(n.GetInterfaces()) != 3 {
		t.Errorf("network %v, want eth0 the default of 3 interfaces", n)
	}
}
