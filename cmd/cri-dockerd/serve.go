package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/config"
	"github.com/cri-dockerd/cri-dockerd/core"
	"github.com/cri-dockerd/cri-dockerd/libdocker"
	"github.com/cri-dockerd/cri-dockerd/streaming"
)

// maxMsgSize matches the kubelet's CRI client limit, so large list answers get through.
const maxMsgSize = 16 * 1024 * 1024

func serve(ctx context.Context, cfg *config.Config) error {
	logger := logrus.New()
	level, _ := logrus.ParseLevel(cfg.LogLevel)
	logger.SetLevel(level)
	log := logrus.NewEntry(logger)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := os.MkdirAll(cfg.RootDirectory, 0o700); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	docker, err := libdocker.New(libdocker.Options{Endpoint: cfg.DockerEndpoint, RequestTimeout: cfg.RuntimeRequestTimeout})
	if err != nil {
		return fmt.Errorf("docker client for %s: %w", cfg.DockerEndpoint, err)
	}
	startCtx, cancel := context.WithTimeout(ctx, cfg.RuntimeRequestTimeout)
	defer cancel()
	if err := docker.Ping(startCtx); err != nil {
		return fmt.Errorf("docker at %s is not reachable: %w", cfg.DockerEndpoint, err)
	}
	streams, err := streaming.NewServer(streaming.Options{BindAddr: cfg.StreamingBindAddr, Docker: docker, Logger: log})
	if err != nil {
		return err
	}
	defer streams.Stop()
	svc, err := core.New(startCtx, docker, core.Options{
		PodInfraImage:             cfg.PodInfraContainerImage,
		ImagePullProgressDeadline: cfg.ImagePullProgressDeadline,
		RuntimeHandlerAliases:     cfg.RuntimeHandlerAliases,
		DefaultRuntimeHandler:     cfg.DefaultRuntimeHandler,
		NetworkPlugin:             cfg.NetworkPlugin,
		RootDirectory:             cfg.RootDirectory,
		Streaming:                 streams,
		Logger:                    logger,
	})
	if err != nil {
		return err
	}

	socketPath := strings.TrimPrefix(cfg.ContainerRuntimeEndpoint, "unix://")
	lis, err := listenUnix(socketPath)
	if err != nil {
		return err
	}
	server := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.ChainUnaryInterceptor(core.RecoverUnary(log), core.LogErrors(log)),
		grpc.ChainStreamInterceptor(core.RecoverStream(log)),
	)
	runtimeapi.RegisterRuntimeServiceServer(server, svc)
	runtimeapi.RegisterImageServiceServer(server, svc)

	served := make(chan error, 1)
	go func() { served <- server.Serve(lis) }()
	streamsServed := make(chan error, 1)
	go func() { streamsServed <- streams.Serve() }()
	log.WithField("url", streams.URL()).Info("streaming server (exec, attach, port-forward) listening")
	log.WithFields(logrus.Fields{"endpoint": cfg.ContainerRuntimeEndpoint, "docker": cfg.DockerEndpoint, "docker_api": docker.APIVersion(), "version": core.Version}).Info("cri-dockerd serving")

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err := <-streamsServed:
		return fmt.Errorf("streaming server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	stopped := make(chan struct{})
	go func() { server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		server.Stop()
	}
	_ = os.Remove(socketPath)
	svc.Close()
	return nil
}

// listenUnix listens on path with mode 0660 (group docker when it exists, as upstream's socket
// unit does). A stale socket file left by a crash is replaced; a live one is an error, so that
// two daemons never fight over one socket.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another --container-runtime-endpoint", path)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("%s is in use by another process (another cri-dockerd?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// Create the socket with no permissions for others from the start, then open it to the group.
	old := syscall.Umask(0o117)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, err
	}
	if g, err := user.LookupGroup("docker"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			if err := os.Chown(path, -1, gid); err != nil && !errors.Is(err, os.ErrPermission) {
				lis.Close()
				return nil, err
			}
		}
	}
	return lis, nil
}

// moduleVersion is the version of a dependency as recorded in the binary.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}
