package core

import (
	"context"

	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// ListImages lists Docker's images (tagged or pulled by digest), optionally one image only.
// A filter's runtime_handler lists the same images: Docker has one image store.
func (s *Service) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	if err := s.checkImageHandler(ctx, req.GetFilter().GetImage()); err != nil {
		return nil, err
	}
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		img, err := s.docker.InspectImage(ctx, ref)
		if libdocker.IsNotFound(err) {
			return &runtimeapi.ListImagesResponse{}, nil
		}
		if err != nil {
			return nil, dockerError(err, "inspect image %q", ref)
		}
		return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{s.criImage(ctx, img)}}, nil
	}
	list, err := s.docker.ListImages(ctx, image.ListOptions{})
	if err != nil {
		return nil, dockerError(err, "list images")
	}
	containerdStore := s.containerdImageStore(ctx)
	out := make([]*runtimeapi.Image, 0, len(list))
	for _, img := range list {
		out = append(out, s.newCRIImage(img.ID, img.RepoTags, img.RepoDigests, img.Size, containerdStore))
	}
	return &runtimeapi.ListImagesResponse{Images: out}, nil
}
