package core

import (
	"context"

	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
)

// What the Docker Engine can do, by the API version our client negotiated. Every behaviour
// that differs between engines is decided here, from one table, so that a new engine version
// is one line to read and one test row to add (engine_test.go).
//
//	API   Docker  what
//	1.42  23      containerd shim names (io.containerd.NAME.vN) as runtimes without configuration
//	1.43  24      HostConfig.Annotations reach the OCI spec
//	1.44  25      CDI device requests; bind mounts read-only recursively (ReadOnlyForceRecursive)
//	              or not (ReadOnlyNonRecursive), where a plain "ro" bind turns recursive
//	1.48  28      mounts of type image
const (
	apiShimNames   = "1.42"
	apiAnnotations = "1.43"
	apiCDI         = "1.44"
	// apiReadOnlyModes is also where "ro" binds become recursively read-only.
	apiReadOnlyModes = "1.44"
	apiImageMounts   = imagevolume.NativeAPIVersion
)

// engineFeatures is what one engine supports.
type engineFeatures struct {
	apiVersion string
	// shimNames: a runtime name io.containerd.NAME.vN needs no daemon.json entry.
	shimNames bool
	// annotations: HostConfig.Annotations reach the runtime (VM runtimes size pods with them).
	annotations bool
	// cdi: DeviceRequests of the cdi driver.
	cdi bool
	// readOnlyModes: BindOptions.ReadOnlyNonRecursive and ReadOnlyForceRecursive exist, and a
	// bind spec "host:ctr:ro" is made recursively read-only (where the kernel can).
	readOnlyModes bool
	// imageMounts: mounts of type image (else cri-dockerd mounts an image's layers itself).
	imageMounts bool
}

// featuresOf decides the features of an engine from its negotiated API version.
func featuresOf(apiVersion string) engineFeatures {
	at := func(min string) bool { return versions.GreaterThanOrEqualTo(apiVersion, min) }
	return engineFeatures{
		apiVersion:    apiVersion,
		shimNames:     at(apiShimNames),
		annotations:   at(apiAnnotations),
		cdi:           at(apiCDI),
		readOnlyModes: at(apiReadOnlyModes),
		imageMounts:   at(apiImageMounts),
	}
}

// engine is what the Docker this service talks to supports.
func (s *Service) engine() engineFeatures {
	return featuresOf(s.docker.APIVersion())
}

// Image stores. Besides the API version, the image store changes what Docker answers: the
// containerd store (Docker 29's default, an option since Docker 24) makes image IDs manifest
// or index digests, keeps image bytes under containerd's root, puts REPO@DIGEST names among
// RepoTags and reports RepoDigests differently in its list and inspect answers (image.go).
const containerdSnapshotterDriverType = "io.containerd.snapshotter.v1"

// containerdImageStore reports whether a daemon's /info describes the containerd image store:
// its DriverStatus names the snapshotter plugin type as driver-type.
func containerdImageStore(info system.Info) bool {
	for _, kv := range info.DriverStatus {
		if kv[0] == "driver-type" && kv[1] == containerdSnapshotterDriverType {
			return true
		}
	}
	return false
}

// containerdImageStore reports whether Docker uses the containerd image store, from the cached
// /info (the store changes only with a restart of dockerd, and its images with it). An /info
// that fails counts as the classic store.
func (s *Service) containerdImageStore(ctx context.Context) bool {
	info, err := s.runtimes.get(ctx)
	return err == nil && containerdImageStore(info.Info)
}
