package core

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version answers Docker's version as the runtime version, as dockershim did ("docker://20.10").
// While Docker does not answer within StatusTimeout, the version it last gave is answered: the
// kubelet asks on every node status update.
func (s *Service) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.opts.StatusTimeout)
	v, err := s.docker.Version(callCtx)
	cancel()
	version := ""
	switch {
	case err == nil:
		version = v.Version
		s.lastVersion.Store(&version)
	case ctx.Err() == nil && s.lastVersion.Load() != nil:
		version = *s.lastVersion.Load()
	default:
		return nil, dockerError(err, "docker version")
	}
	return VersionAnswer(version), nil
}

// UnknownDockerVersion is the runtime version Version answers before Docker was ever reached
// (the standby gate's). Not empty: the kubelet's CRI client and crictl refuse a VersionResponse
// with an empty field ("not all fields are set"); the kubelet's node status then says
// docker://Unknown, as for any version it cannot parse.
const UnknownDockerVersion = "unknown"

// VersionAnswer is Version's answer with runtimeVersion as Docker's version. The other fields
// need no Docker: the standby gate answers VersionAnswer(UnknownDockerVersion) until Docker is
// reached. "0.1.0" is the kubelet runtime API version the kubelet insists on (it refuses any
// other).
func VersionAnswer(runtimeVersion string) *runtimeapi.VersionResponse {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       "docker",
		RuntimeVersion:    runtimeVersion,
		RuntimeApiVersion: CRIAPIVersion,
	}
}
