package core

import (
	"context"
	"runtime/debug"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RecoverUnary turns a panic in a handler into an Internal error for that call only.
func RecoverUnary(log *logrus.Entry) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.WithField("method", info.FullMethod).Errorf("panic: %v\n%s", r, debug.Stack())
				resp, err = nil, status.Errorf(codes.Internal, "%s: internal error (panic: %v); see the cri-dockerd log", info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

// RecoverStream does the same for streaming calls.
func RecoverStream(log *logrus.Entry) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.WithField("method", info.FullMethod).Errorf("panic: %v\n%s", r, debug.Stack())
				err = status.Errorf(codes.Internal, "%s: internal error (panic: %v); see the cri-dockerd log", info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}

// LogErrors logs each failed call at debug level (the kubelet logs them too) with its method.
func LogErrors(log *logrus.Entry) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			log.WithField("method", info.FullMethod).Debugf("error: %v", err)
		}
		return resp, err
	}
}
