package core

import (
	"context"
	"strings"

	"github.com/docker/docker/api/types/image"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// RemoveImage removes an image with all its tags, whichever reference names it, as the CRI
// asks. Removals are serialised (the kubelet removes images one by one anyway): a call that
// finds a tag already gone must not return while another call is still removing the image's
// other tags. An image that does not exist is a success.
func (s *Service) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalidf("image is required")
	}
	if err := s.checkImageHandler(ctx, req.GetImage()); err != nil {
		return nil, err
	}
	s.imageRemoval.Lock()
	defer s.imageRemoval.Unlock()
	img, err := s.docker.InspectImage(ctx, ref)
	if libdocker.IsNotFound(err) {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if err != nil {
		return nil, dockerError(err, "inspect image %q", ref)
	}
	if users := s.imageVolumes.UsersOf(ctx, img.ID); len(users) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "image %q (%s) is mounted as an image volume by container %s: remove the container first", ref, img.ID, strings.Join(users, ", "))
	}
	// Untag each name first: Docker refuses to remove an ID with several tags without force,
	// and force would also remove an image a container still uses.
	for _, tag := range realReferences(img.RepoTags) {
		if _, err := s.docker.RemoveImage(ctx, tag, image.RemoveOptions{PruneChildren: true}); err != nil && !libdocker.IsNotFound(err) {
			return nil, dockerError(err, "remove image %q", tag)
		}
	}
	if _, err := s.docker.RemoveImage(ctx, img.ID, image.RemoveOptions{PruneChildren: true}); err != nil && !libdocker.IsNotFound(err) {
		return nil, dockerError(err, "remove image %q", img.ID)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
