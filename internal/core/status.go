package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StatusTimeout bounds how long Status and Version wait for Docker: a frozen dockerd must not
// hold the kubelet's node status until its own deadline.
const StatusTimeout = 2 * time.Second

// Status's reasons while Docker is not ready: DockerDaemonNotReady while it is not reached (not
// running, refused; also the standby gate's before the first connection), and
// DockerDaemonNotResponding while it takes longer than StatusTimeout (frozen, or overloaded).
const (
	DockerDaemonNotReady      = "DockerDaemonNotReady"
	DockerDaemonNotResponding = "DockerDaemonNotResponding"
)

// Status reports readiness from a live ping of Docker bounded by StatusTimeout, and the runtime
// handlers this node can serve from the cached /info (refreshed when older than
// RuntimeInfoMaxAge, and as it is while Docker does not answer).
func (s *Service) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	networkReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	pingCtx, cancel := context.WithTimeout(ctx, s.opts.StatusTimeout)
	err := s.docker.Ping(pingCtx)
	cancel()
	dockerUp := err == nil
	if err != nil {
		reason, message := dockerNotReady(ctx, err, s.opts.StatusTimeout)
		runtimeReady.Status, runtimeReady.Reason, runtimeReady.Message = false, reason, message
		networkReady.Status, networkReady.Reason, networkReady.Message = false, reason, message
	} else if err := s.net.Status(); err != nil {
		// No CNI config yet: the kubelet keeps the node NotReady until one appears.
		networkReady.Status, networkReady.Reason, networkReady.Message = false, "NetworkPluginNotReady", err.Error()
	}
	resp := &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeReady, networkReady}},
		RuntimeHandlers: s.runtimeHandlers(ctx, dockerUp),
		// Neither the Strict supplemental groups policy nor a bind's noexec, nodev or nosuid
		// reaches a container through Docker's API: CreateContainer refuses both.
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: false, MountOptions: false},
	}
	if req.Verbose {
		// sandboxImage is the key upstream writes and kubeadm reads for its pause image check.
		raw, _ := json.Marshal(map[string]any{"sandboxImage": s.opts.PodInfraImage, "networkPlugin": s.opts.NetworkPlugin, "podInfraImage": s.opts.PodInfraImage, "runtimeHandlerAliases": s.opts.RuntimeHandlerAliases, "privilegedWithoutHostDevices": s.opts.PrivilegedWithoutHostDevices, "nri": s.nriState, "nriPlugins": s.nri.Plugins()})
		resp.Info = map[string]string{"config": string(raw)}
	}
	return resp, nil
}

// dockerNotReady is the reason and message of a failed ping: DockerDaemonNotResponding when
// Docker took longer than timeout (frozen, or overloaded), DockerDaemonNotReady otherwise (not
// running, refused).
func dockerNotReady(ctx context.Context, err error, timeout time.Duration) (reason, message string) {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return DockerDaemonNotResponding, fmt.Sprintf("docker did not answer a ping within %s: %v", timeout, err)
	}
	return DockerDaemonNotReady, "docker: " + err.Error()
}

// runtimeHandlers lists "" (the default), the default handler name, every Docker runtime and
// every alias. Recursive read-only mounts are reported where Docker (25+), the kernel and the
// runtime (runc) can make them; Docker cannot map user namespaces per pod. With Docker down, or
// slower than StatusTimeout, the last /info it gave is used as it is.
func (s *Service) runtimeHandlers(ctx context.Context, dockerUp bool) []*runtimeapi.RuntimeHandler {
	// Each handler with the Docker runtime it selects ("" is Docker's default).
	handlers := map[string]string{"": ""}
	if s.opts.DefaultRuntimeHandler != "" {
		handlers[s.opts.DefaultRuntimeHandler] = ""
	}
	info := s.runtimes.cached()
	if dockerUp {
		infoCtx, cancel := context.WithTimeout(ctx, s.opts.StatusTimeout)
		if fresh, err := s.runtimes.getFresh(infoCtx, s.opts.RuntimeInfoMaxAge); err == nil {
			info = fresh
		}
		cancel()
	}
	if info != nil {
		for name := range info.Runtimes {
			handlers[name] = name
		}
	}
	for name, rt := range s.opts.RuntimeHandlerAliases {
		handlers[name] = rt
	}
	sorted := make([]string, 0, len(handlers))
	for name := range handlers {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	out := make([]*runtimeapi.RuntimeHandler, 0, len(sorted))
	for _, name := range sorted {
		features := &runtimeapi.RuntimeHandlerFeatures{}
		if info != nil {
			features.RecursiveReadOnlyMounts = recursiveReadOnlySupported(info, handlers[name])
		}
		out = append(out, &runtimeapi.RuntimeHandler{Name: name, Features: features})
	}
	return out
}
