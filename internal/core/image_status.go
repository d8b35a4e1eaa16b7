package core

import (
	"context"
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// ImageStatus answers an empty response, not an error, for an image Docker does not have.
func (s *Service) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalidf("image is required")
	}
	if err := s.checkImageHandler(ctx, req.GetImage()); err != nil {
		return nil, err
	}
	img, err := s.docker.InspectImage(ctx, ref)
	if libdocker.IsNotFound(err) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, dockerError(err, "inspect image %q", ref)
	}
	resp := &runtimeapi.ImageStatusResponse{Image: s.criImage(ctx, img)}
	if req.Verbose {
		raw, _ := json.Marshal(img)
		resp.Info = map[string]string{"info": string(raw)}
	}
	return resp, nil
}
