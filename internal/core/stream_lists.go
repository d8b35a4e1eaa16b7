package core

import (
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The streaming list RPCs (CRI v0.37, KEP-5825) answer what their List counterparts answer,
// split into messages of at most streamChunkBytes so that a node with many pods never hits
// gRPC's message size limit. Every item is sent exactly once; an empty list sends no message.
const streamChunkBytes = 1 << 20

// sendChunks sends items in consecutive slices of about streamChunkBytes encoded bytes, each
// holding at least one item.
func sendChunks[T proto.Message](items []T, send func([]T) error) error {
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it)
		if i > start && size+n > streamChunkBytes {
			if err := send(items[start:i]); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += n
	}
	if start < len(items) {
		return send(items[start:])
	}
	return nil
}

// StreamPodSandboxes is ListPodSandbox, streamed.
func (s *Service) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	resp, err := s.ListPodSandbox(stream.Context(), &runtimeapi.ListPodSandboxRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Items, func(items []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: items})
	})
}

// StreamContainers is ListContainers, streamed.
func (s *Service) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	resp, err := s.ListContainers(stream.Context(), &runtimeapi.ListContainersRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Containers, func(items []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: items})
	})
}

// StreamContainerStats is ListContainerStats, streamed.
func (s *Service) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	stats, err := s.listContainerStats(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(stats, func(items []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: items})
	})
}

// StreamPodSandboxStats is ListPodSandboxStats, streamed.
func (s *Service) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	stats, err := s.listPodSandboxStats(stream.Context(), req.GetFilter().GetId(), req.GetFilter().GetLabelSelector(), false)
	if err != nil {
		return err
	}
	return sendChunks(stats, func(items []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: items})
	})
}

// StreamImages is ListImages, streamed.
func (s *Service) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	resp, err := s.ListImages(stream.Context(), &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Images, func(items []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: items})
	})
}
