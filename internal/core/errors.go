package core

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// invalidf answers a request the caller must fix.
func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// notFoundf answers a request for an object that does not exist.
func notFoundf(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

// dockerError turns an error from Docker into a gRPC status, keeping what the call was doing.
func dockerError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := fmt.Sprintf(format, args...) + ": " + err.Error()
	code := codes.Unknown
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, libdocker.ErrUnknownRuntime), errors.Is(err, libdocker.ErrRuntimeFailed):
		code = codes.FailedPrecondition
	case libdocker.IsUnavailable(err):
		code = codes.Unavailable
	case libdocker.IsNotFound(err):
		code = codes.NotFound
	case libdocker.IsConflict(err):
		code = codes.FailedPrecondition
	case cerrdefs.IsInvalidArgument(err):
		// Docker's "invalid parameter" (400), and "multiple IDs found with provided prefix": the
		// caller must change the request. After the runtime kinds, which Docker also sends as 400s.
		code = codes.InvalidArgument
	}
	return status.Error(code, msg)
}
