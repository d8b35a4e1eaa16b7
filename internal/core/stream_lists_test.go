package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// sink is the server side of a server-streaming call that keeps what is sent.
type sink[T any] struct {
	grpc.ServerStream
	sent []*T
}

func (s *sink[T]) Context() context.Context { return context.Background() }
func (s *sink[T]) Send(m *T) error {
	s.sent = append(s.sent, m)
	return nil
}

func TestStreamingListsSendEveryItemOnceInBoundedMessages(t *testing.T) {
	// 3000 sandboxes with 1 KiB of labels each: several messages of at most about 1 MiB.
	items := make([]*runtimeapi.PodSandbox, 3000)
	for i := range items {
		items[i] = &runtimeapi.PodSandbox{Id: strings.Repeat("x", 10) + string(rune(i)), Labels: map[string]string{"big": strings.Repeat("v", 1024)}}
	}
	var chunks [][]*runtimeapi.PodSandbox
	if err := sendChunks(items, func(c []*runtimeapi.PodSandbox) error { chunks = append(chunks, c); return nil }); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range chunks {
		if len(c) == 0 {
			t.Fatal("an empty message")
		}
		if size := proto.Size(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c}); size > streamChunkBytes+64*1024 {
			t.Errorf("message of %d bytes", size)
		}
		for _, it := range c {
			if it != items[total] {
				t.Fatalf("item %d out of order or repeated", total)
			}
			total++
		}
	}
	if total != len(items) || len(chunks) < 3 {
		t.Errorf("%d items in %d messages", total, len(chunks))
	}
	chunks = nil
	if err := sendChunks([]*runtimeapi.PodSandbox{}, func(c []*runtimeapi.PodSandbox) error { chunks = append(chunks, c); return nil }); err != nil || len(chunks) != 0 {
		t.Errorf("empty list: %d messages, %v", len(chunks), err)
	}
}

func TestStreamingListsAnswerWhatListsAnswer(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "streamed", "")
	id := startedContainer(t, s, podID, podCfg, "c")

	pods := &sink[runtimeapi.StreamPodSandboxesResponse]{}
	if err := s.StreamPodSandboxes(&runtimeapi.StreamPodSandboxesRequest{}, pods); err != nil || len(pods.sent) != 1 || pods.sent[0].PodSandboxes[0].Id != podID {
		t.Errorf("StreamPodSandboxes: %v, %v", pods.sent, err)
	}
	ctrs := &sink[runtimeapi.StreamContainersResponse]{}
	if err := s.StreamContainers(&runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: podID}}, ctrs); err != nil || len(ctrs.sent) != 1 || ctrs.sent[0].Containers[0].Id != id {
		t.Errorf("StreamContainers: %v, %v", ctrs.sent, err)
	}
	none := &sink[runtimeapi.StreamContainersResponse]{}
	if err := s.StreamContainers(&runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "ffff"}}, none); err != nil || len(none.sent) != 0 {
		t.Errorf("StreamContainers with no match: %v, %v", none.sent, err)
	}
	stats := &sink[runtimeapi.StreamContainerStatsResponse]{}
	if err := s.StreamContainerStats(&runtimeapi.StreamContainerStatsRequest{}, stats); err != nil || len(stats.sent) != 1 || stats.sent[0].ContainerStats[0].Attributes.Id != id {
		t.Errorf("StreamContainerStats: %v, %v", stats.sent, err)
	}
	podStats := &sink[runtimeapi.StreamPodSandboxStatsResponse]{}
	if err := s.StreamPodSandboxStats(&runtimeapi.StreamPodSandboxStatsRequest{}, podStats); err != nil || len(podStats.sent) != 1 || podStats.sent[0].PodSandboxStats[0].Attributes.Id != podID {
		t.Errorf("StreamPodSandboxStats: %v, %v", podStats.sent, err)
	}
	images := &sink[runtimeapi.StreamImagesResponse]{}
	list, _ := s.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err := s.StreamImages(&runtimeapi.StreamImagesRequest{}, images); err != nil || len(images.sent) != 1 || len(images.sent[0].Images) != len(list.Images) {
		t.Errorf("StreamImages: %v, %v", images.sent, err)
	}
}
