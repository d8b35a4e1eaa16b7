package libdocker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// FakeImage builds a realistic image (linux/amd64, command /bin/sh, 5 MB). An empty id gets a
// random one; user is the image's USER.
func FakeImage(id, user string, tags ...string) image.InspectResponse {
	if id == "" {
		id = randomID()
	}
	if !strings.HasPrefix(id, "sha256:") {
		id = "sha256:" + id
	}
	return image.InspectResponse{
		ID:           id,
		RepoTags:     slices.Clone(tags),
		Created:      time.Now().UTC().Format(time.RFC3339Nano),
		Architecture: "amd64",
		Os:           "linux",
		Size:         5 << 20,
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{
			User: user,
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:  []string{"/bin/sh"},
		}},
		RootFS: image.RootFS{Type: "layers", Layers: []string{"sha256:" + randomID()}},
	}
}

// AddImage stores img as if built, loaded or imported: it has only the RepoDigests given
// (a real Docker has none until a pull or push). RepoTags and RepoDigests are normalized the
// way Docker reports them ("busybox:latest"); a tag already on another image moves to img. It
// returns the image ID and panics on an invalid tag.
func (f *Fake) AddImage(img image.InspectResponse) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.storeImage(clone(img))
	f.emitImage(events.ActionLoad, id, id)
	return id
}

// AddPullable makes PullImage(ref) succeed and store img tagged with ref, with the repo digest
// a registry gives: REPOSITORY@DIGEST, DIGEST from img.RepoDigests or else derived from its ID.
func (f *Fake) AddPullable(ref string, img image.InspectResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img = clone(img)
	if img.ID == "" {
		img.ID = "sha256:" + randomID() // one image however often it is pulled
	}
	f.pullable[mustFamiliar(ref)] = img
}

// SetPullDelay makes each pull take d without progress, to exercise cancellation and the
// progress deadline.
func (f *Fake) SetPullDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pullDelay = d
}

// LastPullAuth returns the auth config of the most recent PullImage call.
func (f *Fake) LastPullAuth() registry.AuthConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastPullAuth
}

func (f *Fake) storeImage(img image.InspectResponse) string {
	if img.ID == "" {
		img.ID = "sha256:" + randomID()
	}
	if !strings.HasPrefix(img.ID, "sha256:") {
		img.ID = "sha256:" + img.ID
	}
	tags := img.RepoTags
	img.RepoTags = nil
	if f.containerdStore {
		tags, img.RepoDigests = append(tags, img.RepoDigests...), nil // digest names are names there
	}
	if old, ok := f.images[img.ID]; ok {
		img.RepoTags, img.RepoDigests = old.RepoTags, mergeUnique(old.RepoDigests, img.RepoDigests)
	}
	for i, d := range img.RepoDigests {
		img.RepoDigests[i] = mustFamiliar(d)
	}
	f.images[img.ID] = &img
	for _, t := range tags {
		f.tag(img.ID, mustFamiliar(t))
	}
	return img.ID
}

// tag points tag at id, taking it away from any other image (which may become dangling).
func (f *Fake) tag(id, tag string) {
	for _, other := range f.images {
		other.RepoTags = slices.DeleteFunc(other.RepoTags, func(t string) bool { return t == tag })
	}
	img := f.images[id]
	img.RepoTags = append(img.RepoTags, tag)
}

func mergeUnique(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// familiar normalizes a name reference as Docker's reference store does: "busybox" and
// "docker.io/library/busybox" both become "busybox:latest"; digests are kept.
func familiar(ref string) (string, error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", err
	}
	if _, ok := n.(reference.Canonical); ok {
		return reference.FamiliarString(n), nil
	}
	return reference.FamiliarString(reference.TagNameOnly(n)), nil
}

func mustFamiliar(ref string) string {
	s, err := familiar(ref)
	if err != nil {
		panic(fmt.Sprintf("libdocker.Fake: invalid image reference %q: %v", ref, err))
	}
	return s
}

// lookupImage resolves ref like the daemon's GetImage: a full digest is an ID; a name is
// looked up as a tag (":latest" added) or digest reference, then as an ID prefix.
func (f *Fake) lookupImage(ref string) (*image.InspectResponse, error) {
	parsed, err := reference.ParseAnyReference(ref)
	if err != nil {
		return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
	}
	named, ok := parsed.(reference.Named)
	if !ok {
		if img, ok := f.images[parsed.String()]; ok {
			return img, nil
		}
		return nil, notFound("image", parsed.String())
	}
	_, canonical := named.(reference.Canonical)
	want := reference.FamiliarString(reference.TagNameOnly(named))
	for _, img := range f.images {
		if (!canonical && slices.Contains(img.RepoTags, want)) || (canonical && f.hasRepoDigest(img, want)) {
			return img, nil
		}
	}
	prefix := strings.TrimPrefix(ref, "sha256:")
	var match *image.InspectResponse
	for id, img := range f.images {
		if strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), prefix) {
			if match != nil {
				match = nil // ambiguous: the daemon's search fails, so does the lookup
				break
			}
			match = img
		}
	}
	if match != nil && !canonical {
		return match, nil
	}
	return nil, notFound("image", want)
}

// InspectImage implements Client.
func (f *Fake) InspectImage(ctx context.Context, ref string) (*image.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "InspectImage"); err != nil {
		return nil, err
	}
	img, err := f.lookupImage(ref)
	if err != nil {
		return nil, err
	}
	out := f.inspectView(img)
	return &out, nil
}

// ListImages implements Client. It honours the "reference" and "dangling" filters and
// rejects filters it does not emulate rather than ignore them.
func (f *Fake) ListImages(ctx context.Context, opts image.ListOptions) ([]image.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ListImages"); err != nil {
		return nil, err
	}
	if err := validateFilters(opts.Filters, "reference", "dangling"); err != nil {
		return nil, err
	}
	var out []image.Summary
	for _, img := range f.sortedImages() {
		if opts.Filters.Contains("dangling") {
			if opts.Filters.ExactMatch("dangling", "true") != (len(img.RepoTags) == 0) {
				continue
			}
		}
		if opts.Filters.Contains("reference") && !matchesReference(opts.Filters.Get("reference"), img.RepoTags) {
			continue
		}
		out = append(out, f.imageSummary(img, -1))
	}
	return out, nil
}

func matchesReference(patterns, tags []string) bool {
	for _, p := range patterns {
		for _, t := range tags {
			n, err := reference.ParseNormalizedNamed(t)
			if err != nil {
				continue
			}
			if ok, _ := reference.FamiliarMatch(p, n); ok {
				return true
			}
		}
	}
	return false
}

func (f *Fake) imageSummary(img *image.InspectResponse, containers int64) image.Summary {
	s := image.Summary{
		ID: img.ID, RepoTags: slices.Clone(img.RepoTags), RepoDigests: slices.Clone(img.RepoDigests),
		Size: img.Size, SharedSize: -1, Containers: containers, Labels: map[string]string{},
	}
	if f.containerdStore {
		s.RepoDigests = containerdListDigests(img)
	}
	if s.RepoTags == nil {
		s.RepoTags = []string{}
	}
	if s.RepoDigests == nil {
		s.RepoDigests = []string{}
	}
	if t, err := time.Parse(time.RFC3339Nano, img.Created); err == nil {
		s.Created = t.Unix()
	}
	if img.Config != nil {
		for k, v := range img.Config.Labels {
			s.Labels[k] = v
		}
	}
	return s
}

func (f *Fake) sortedImages() []*image.InspectResponse {
	out := make([]*image.InspectResponse, 0, len(f.images))
	for _, img := range f.images {
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b *image.InspectResponse) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PullImage implements Client.
func (f *Fake) PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error {
	f.mu.Lock()
	if err := f.enter(ctx, "PullImage"); err != nil {
		f.mu.Unlock()
		return err
	}
	f.lastPullAuth = auth
	delay := f.pullDelay
	f.mu.Unlock()

	if delay > 0 {
		wait, stalled := delay, false
		if progressDeadline > 0 && progressDeadline < delay {
			wait, stalled = progressDeadline, true
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("pull %s: %w", ref, context.Cause(ctx))
		case <-timer.C:
			if stalled {
				return fmt.Errorf("pull %s: %w", ref, noProgressError(progressDeadline, nil))
			}
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	want, err := familiar(ref)
	if err != nil {
		return dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
	}
	img, ok := f.pullable[want]
	if !ok {
		return f.pullNotFound(want)
	}
	f.pulledNames(&img, want)
	f.storeImage(clone(img))
	f.emitImage(events.ActionPull, want, want)
	return nil
}

// manifestDigest is the digest the fake registry serves img's manifest under: the one in its
// first RepoDigests, else one derived from its ID, so that every pull of img reports the same.
func manifestDigest(img image.InspectResponse) string {
	for _, d := range img.RepoDigests {
		if _, dg, ok := strings.Cut(d, "@"); ok {
			return dg
		}
	}
	sum := sha256.Sum256([]byte("manifest of " + img.ID))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pullNotFound words the failure as a registry would: a known repository lacks the tag,
// an unknown one is "access denied".
func (f *Fake) pullNotFound(want string) error {
	n, _ := reference.ParseNormalizedNamed(want)
	repo := reference.FamiliarName(n)
	for p := range f.pullable {
		pn, _ := reference.ParseNormalizedNamed(p)
		if reference.FamiliarName(pn) == repo {
			return dErr(cerrdefs.ErrNotFound, "manifest for %s not found: manifest unknown: manifest unknown", want)
		}
	}
	return dErr(cerrdefs.ErrNotFound, "pull access denied for %s, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", repo)
}

// RemoveImage implements Client with the daemon's ImageDelete rules, and its untag and delete
// events.
func (f *Fake) RemoveImage(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	records, err := f.removeImageLocked(ctx, ref, opts)
	for _, r := range records {
		if r.Untagged != "" {
			f.emitImage(events.ActionUnTag, r.Untagged, r.Untagged)
		}
		if r.Deleted != "" {
			f.emitImage(events.ActionDelete, r.Deleted, r.Deleted)
		}
	}
	return records, err
}

func (f *Fake) removeImageLocked(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	if err := f.enter(ctx, "RemoveImage"); err != nil {
		return nil, err
	}
	img, err := f.lookupImage(ref)
	if err != nil {
		return nil, err
	}
	id := img.ID
	var records []image.DeleteResponse
	running, stopped := f.imageUsers(id)
	byID := strings.HasPrefix(id, ref) || strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), ref)
	if !byID {
		if !opts.Force && len(img.RepoTags) <= 1 {
			if c := firstNonNil(running, stopped); c != nil {
				return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to remove repository reference %q (must force) - container %s is using its referenced image %s", ref, short(c.resp.ID), short(id))
			}
		}
		tag, err := familiar(ref)
		if err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid reference format: %v", err)
		}
		if strings.Contains(tag, "@") && !f.containerdStore {
			img.RepoDigests = slices.DeleteFunc(img.RepoDigests, func(d string) bool { return d == tag })
		} else {
			img.RepoTags = slices.DeleteFunc(img.RepoTags, func(t string) bool { return t == tag })
		}
		records = append(records, image.DeleteResponse{Untagged: tag})
		if len(img.RepoTags) > 0 {
			return records, nil
		}
		if running != nil || stopped != nil {
			return records, nil // in use: the daemon leaves the image dangling, quietly
		}
	} else {
		if running != nil {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (cannot be forced) - image is being used by running container %s", short(id), short(running.resp.ID))
		}
		if !opts.Force && len(img.RepoTags) > 1 {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (must be forced) - image is referenced in multiple repositories", short(id))
		}
		if !opts.Force && stopped != nil {
			return nil, dErr(cerrdefs.ErrConflict, "conflict: unable to delete %s (must be forced) - image is being used by stopped container %s", short(id), short(stopped.resp.ID))
		}
	}
	for _, t := range append(img.RepoTags, img.RepoDigests...) {
		records = append(records, image.DeleteResponse{Untagged: t})
	}
	delete(f.images, id)
	records = append(records, image.DeleteResponse{Deleted: id})
	return records, nil
}

func firstNonNil(a, b *fakeContainer) *fakeContainer {
	if a != nil {
		return a
	}
	return b
}

func (f *Fake) imageUsers(id string) (running, stopped *fakeContainer) {
	for _, c := range f.sortedContainers(false) {
		if c.resp.Image != id {
			continue
		}
		if c.resp.State.Running && running == nil {
			running = c
		} else if !c.resp.State.Running && stopped == nil {
			stopped = c
		}
	}
	return running, stopped
}

// DiskUsage implements Client; image Containers counts the containers using each image.
func (f *Fake) DiskUsage(ctx context.Context, opts types.DiskUsageOptions) (types.DiskUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "DiskUsage"); err != nil {
		return types.DiskUsage{}, err
	}
	want := func(o types.DiskUsageObject) bool { return len(opts.Types) == 0 || slices.Contains(opts.Types, o) }
	var du types.DiskUsage
	if want(types.ImageObject) {
		du.Images = []*image.Summary{}
		for _, img := range f.sortedImages() {
			var n int64
			for _, c := range f.containers {
				if c.resp.Image == img.ID {
					n++
				}
			}
			s := f.imageSummary(img, n)
			du.Images = append(du.Images, &s)
			du.LayersSize += img.Size
		}
	}
	if want(types.ContainerObject) {
		du.Containers = []*container.Summary{}
		for _, c := range f.sortedContainers(true) {
			s := c.summary()
			s.SizeRw = c.sizeRw
			du.Containers = append(du.Containers, &s)
		}
	}
	return du, nil
}
