package core

import (
	"context"

	"github.com/docker/docker/api/types/registry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls an image with the given registry credentials and answers its ID. The
// request's context reaches Docker: a kubelet that gives up cancels the pull.
func (s *Service) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalidf("image is required")
	}
	if err := s.checkImageHandler(ctx, req.GetImage()); err != nil {
		return nil, err
	}
	var auth registry.AuthConfig
	if a := req.GetAuth(); a != nil {
		auth = registry.AuthConfig{
			Username:      a.Username,
			Password:      a.Password,
			Auth:          a.Auth,
			ServerAddress: a.ServerAddress,
			IdentityToken: a.IdentityToken,
			RegistryToken: a.RegistryToken,
		}
	}
	if err := s.docker.PullImage(ctx, ref, auth, s.opts.ImagePullProgressDeadline); err != nil {
		if ctx.Err() != nil {
			return nil, dockerError(ctx.Err(), "pull image %q", ref)
		}
		return nil, dockerError(err, "pull image %q", ref)
	}
	img, err := s.docker.InspectImage(ctx, ref)
	if err != nil {
		return nil, dockerError(err, "inspect pulled image %q", ref)
	}
	return &runtimeapi.PullImageResponse{ImageRef: img.ID}, nil
}
