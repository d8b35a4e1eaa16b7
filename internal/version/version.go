// Package version is cri-dockerd's own version, set by the linker (the Makefile's LDFLAGS).
package version

var (
	// Version is the release, from the VERSION file.
	Version = "0.1.0-dev"
	// GitCommit is the commit the binary was built from.
	GitCommit = "unknown"
)
