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
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       "docker",
		RuntimeVersion:    version,
		RuntimeApiVersion: CRIAPIVersion,
	}, nil
}
