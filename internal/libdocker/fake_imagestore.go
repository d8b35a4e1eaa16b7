package libdocker

import (
	"slices"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
)

// The containerd image store (Docker 29's default, an option since Docker 24) keeps one image
// record per name, each pointing at a target: the manifest or index digest, which is also the
// image ID. Docker's answers about names differ from the classic store's (moby
// daemon/containerd image_list.go, image_inspect.go):
//
//   - a pull by digest leaves a record named REPO@DIGEST, which both list and inspect put among
//     RepoTags (inspect also among RepoDigests);
//   - inspect's RepoDigests hold every name's REPO@TARGET, list's only one name's: of the records
//     with that target, the last in containerd's order (by full name).
//
// With the store on, the fake keeps every name of an image, tags and digest names alike, in
// RepoTags, leaves RepoDigests empty, and computes what each call answers.

// SetContainerdImageStore switches the fake to the containerd image store (on) or the classic
// overlay2 store (off, the default). Switch it before adding images: the two stores do not
// share them.
func (f *Fake) SetContainerdImageStore(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containerdStore = on
}

// storeDriver is Info's Driver and DriverStatus for the image store.
func (f *Fake) storeDriver() (string, [][2]string) {
	if f.containerdStore {
		return "overlayfs", [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}
	}
	return "overlay2", [][2]string{{"Backing Filesystem", "extfs"}, {"Supports d_type", "true"}, {"Native Overlay Diff", "true"}, {"userxattr", "false"}}
}

// repoDigestOf is REPO@DIGEST for a name (a tag or a digest name) of an image with target id.
func repoDigestOf(name, id string) (string, bool) {
	n, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", false
	}
	if c, ok := n.(reference.Canonical); ok {
		return reference.FamiliarName(n) + "@" + c.Digest().String(), true
	}
	return reference.FamiliarName(n) + "@" + id, true
}

// containerdRepoDigests is inspect's RepoDigests: every name's REPO@TARGET, deduplicated.
func containerdRepoDigests(img *image.InspectResponse) []string {
	out := []string{}
	for _, name := range img.RepoTags {
		if d, ok := repoDigestOf(name, img.ID); ok && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// containerdListDigests is list's RepoDigests: the REPO@TARGET of one name only, the last by
// full name, as the daemon keeps the last record of each target that containerd lists.
func containerdListDigests(img *image.InspectResponse) []string {
	last, lastFull := "", ""
	for _, name := range img.RepoTags {
		n, err := reference.ParseNormalizedNamed(name)
		if err != nil {
			continue
		}
		if full := n.String(); full > lastFull {
			last, lastFull = name, full
		}
	}
	if last == "" {
		return []string{}
	}
	d, _ := repoDigestOf(last, img.ID)
	return []string{d}
}

// hasRepoDigest reports whether a digest reference (familiar REPO@DIGEST) resolves to img: in
// the classic store it must be one of its RepoDigests; in the containerd store the digest must
// be its target and the repository one of its names' (moby's resolveImage).
func (f *Fake) hasRepoDigest(img *image.InspectResponse, ref string) bool {
	if !f.containerdStore {
		return slices.Contains(img.RepoDigests, ref)
	}
	return slices.Contains(containerdRepoDigests(img), ref)
}

// inspectView is what InspectImage answers for img.
func (f *Fake) inspectView(img *image.InspectResponse) image.InspectResponse {
	out := clone(*img)
	if f.containerdStore {
		out.RepoDigests = containerdRepoDigests(img)
	}
	return out
}

// pulledNames sets the names a pull of want (familiar) leaves on img, and in the containerd
// store its ID, the digest of the manifest pulled.
func (f *Fake) pulledNames(img *image.InspectResponse, want string) {
	n, _ := reference.ParseNormalizedNamed(want)
	digestRef := strings.Contains(want, "@")
	if !f.containerdStore {
		// Docker records the digest of the manifest it pulled under the repository pulled from.
		if digestRef {
			img.RepoTags, img.RepoDigests = nil, []string{want}
		} else {
			img.RepoTags, img.RepoDigests = []string{want}, []string{reference.FamiliarName(n) + "@" + manifestDigest(*img)}
		}
		return
	}
	id := manifestDigest(*img)
	if c, ok := n.(reference.Canonical); ok {
		id = c.Digest().String()
	}
	img.ID, img.RepoTags, img.RepoDigests = id, []string{want}, nil
}
