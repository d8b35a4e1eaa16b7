package core

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image IDs are Docker's content IDs ("sha256:..."): PullImage's image_ref, Image.id,
// ContainerStatus.image_id and Container.image_id are all that same string, as the CRI asks.
// ContainerStatus.image_ref alone has upstream's docker-pullable:// form (container_status.go).

// criImageRefs turns Docker's names of an image into the CRI's repo_tags and repo_digests, so
// that ListImages and ImageStatus report the same for the same image on either image store.
//
//   - repo_tags never hold a digest reference: the containerd store lists the name a pull by
//     digest leaves (REPO@DIGEST, or REPO:TAG@DIGEST) among RepoTags; it is a repo digest
//     (REPO@DIGEST), and is reported as one.
//   - The classic store's list and inspect read the same reference store and agree. The
//     containerd store's do not: inspect reports every name's REPO@TARGET, list only one name's
//     (that of the record it happened to keep for the target). Inspecting each listed image
//     would cost a Docker call per image on every list; but in that store the image ID is the
//     target, so the repo digests are derived from the names and the ID, which both calls give
//     in full: what inspect says, from either call.
//   - Docker's placeholders ("<none>:<none>", "<none>@<none>") and a repo digest without a
//     repository (the containerd store lists the bare target of an image no platform of which
//     it holds) are dropped; repo digests are deduplicated and sorted, tags deduplicated in
//     Docker's order.
func criImageRefs(id string, tags, digests []string, containerdStore bool) (repoTags, repoDigests []string) {
	repoTags, repoDigests = []string{}, []string{}
	addDigest := func(d string) {
		if !slices.Contains(repoDigests, d) {
			repoDigests = append(repoDigests, d)
		}
	}
	for _, t := range realReferences(tags) {
		named, err := reference.ParseNormalizedNamed(t)
		if err != nil {
			// Docker lists a malformed name as it is; so do we, as a tag.
			if !slices.Contains(repoTags, t) {
				repoTags = append(repoTags, t)
			}
			continue
		}
		if c, ok := named.(reference.Canonical); ok {
			addDigest(reference.FamiliarName(named) + "@" + c.Digest().String())
			continue
		}
		if !slices.Contains(repoTags, t) {
			repoTags = append(repoTags, t)
		}
		if containerdStore && strings.HasPrefix(id, "sha256:") {
			addDigest(reference.FamiliarName(named) + "@" + id)
		}
	}
	for _, d := range realReferences(digests) {
		ref, err := reference.ParseAnyReference(d)
		if err != nil {
			continue
		}
		named, isNamed := ref.(reference.Named)
		c, isCanonical := ref.(reference.Canonical)
		if !isNamed || !isCanonical {
			continue // a bare digest names no repository
		}
		addDigest(reference.FamiliarName(named) + "@" + c.Digest().String())
	}
	sort.Strings(repoDigests)
	return repoTags, repoDigests
}

// realReferences drops Docker's "<none>:<none>" and "<none>@<none>" placeholders.
func realReferences(refs []string) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if !strings.HasPrefix(r, "<none>") {
			out = append(out, r)
		}
	}
	return out
}

// isPinned keeps the pod infra image out of the kubelet's image garbage collection.
func (s *Service) isPinned(tags []string) bool {
	for _, t := range tags {
		if t == s.opts.PodInfraImage {
			return true
		}
	}
	return false
}

// newCRIImage is the part of a CRI image that both Docker's list and inspect tell.
func (s *Service) newCRIImage(id string, tags, digests []string, size int64, containerdStore bool) *runtimeapi.Image {
	repoTags, repoDigests := criImageRefs(id, tags, digests, containerdStore)
	ci := &runtimeapi.Image{
		Id:          id,
		RepoTags:    repoTags,
		RepoDigests: repoDigests,
		Size:        uint64(size),
		Spec:        &runtimeapi.ImageSpec{Image: id},
	}
	ci.Pinned = s.isPinned(ci.RepoTags)
	return ci
}

func (s *Service) criImage(ctx context.Context, img *image.InspectResponse) *runtimeapi.Image {
	ci := s.newCRIImage(img.ID, img.RepoTags, img.RepoDigests, img.Size, s.containerdImageStore(ctx))
	if img.Config != nil {
		// USER may be "uid", "name", "uid:gid" or "name:group"; the CRI reports the user part.
		user, _, _ := strings.Cut(img.Config.User, ":")
		if uid, err := strconv.ParseInt(user, 10, 64); err == nil {
			ci.Uid = &runtimeapi.Int64Value{Value: uid}
		} else {
			ci.Username = user
		}
	}
	return ci
}

// checkImageHandler fails an image call whose runtime_handler (the kubelet's
// RuntimeClassInImageCriAPI) names a handler RunPodSandbox would refuse, with the same error.
// A known handler changes nothing: Docker has one image store for all its runtimes.
func (s *Service) checkImageHandler(ctx context.Context, spec *runtimeapi.ImageSpec) error {
	if spec.GetRuntimeHandler() == "" {
		return nil
	}
	_, err := s.resolveHandler(ctx, spec.GetRuntimeHandler())
	return err
}
