package core

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
)

// DockerLogLimit bounds Docker's own log of each container. Docker keeps it beside the CRI
// log file, which the kubelet rotates; its default driver, json-file, keeps everything unless
// max-size is set, so a chatty pod would fill Docker's data root.
type DockerLogLimit struct {
	// MaxSize is json-file's max-size (e.g. "10m"); "" leaves Docker's own settings alone.
	MaxSize string
	// MaxFile is json-file's max-file: how many files of MaxSize Docker keeps. Our follower
	// reads them through Docker's API, so what it has not read yet when Docker drops the
	// oldest file (cri-dockerd down for long under a chatty container) is lost.
	MaxFile int
}

// jsonFileDriver is Docker's default log driver, bounded only by max-size.
const jsonFileDriver = "json-file"

// dockerLogConfig is the log config to create a container with, given the daemon's log
// driver and its default log-opts. Docker merges those into a container's own options when
// both name the same driver, so setting ours only where the daemon sets no max-size keeps the
// admin's bound, and the admin's other options. Any other driver (local and journald are
// bounded; the rest reach our follower through Docker's cache of the log) is the admin's
// choice and is left alone.
func dockerLogConfig(limit DockerLogLimit, daemonDriver string, daemonOpts map[string]string) container.LogConfig {
	if limit.MaxSize == "" || daemonDriver != jsonFileDriver || daemonOpts["max-size"] != "" {
		return container.LogConfig{}
	}
	opts := map[string]string{"max-size": limit.MaxSize}
	if limit.MaxFile > 0 {
		opts["max-file"] = strconv.Itoa(limit.MaxFile)
	}
	return container.LogConfig{Type: jsonFileDriver, Config: opts}
}

// daemonLogOpts caches the daemon's default log-opts. The Engine API does not report them
// (/info has the driver only), but Docker records them, merged, in the log config of every
// container created without one of its own, as our sandboxes are: so they are read from a
// sandbox, at most once per maxAge.
type daemonLogOpts struct {
	maxAge time.Duration

	mu      sync.Mutex
	driver  string
	opts    map[string]string
	fetched time.Time
}

// get returns the driver and log-opts Docker gave the sandbox, from the cache when fresh.
func (d *daemonLogOpts) get(ctx context.Context, inspect func(context.Context, string) (*container.InspectResponse, error), sandboxID string) (string, map[string]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.fetched.IsZero() && time.Since(d.fetched) < d.maxAge {
		return d.driver, d.opts, nil
	}
	sb, err := inspect(ctx, sandboxID)
	if err != nil {
		return "", nil, err
	}
	if sb.HostConfig == nil {
		return "", nil, nil
	}
	d.driver, d.opts, d.fetched = sb.HostConfig.LogConfig.Type, sb.HostConfig.LogConfig.Config, time.Now()
	return d.driver, d.opts, nil
}

// applyLogLimit sets the container's log config (see dockerLogConfig). When the daemon's
// defaults cannot be read, the container keeps Docker's.
func (s *Service) applyLogLimit(ctx context.Context, hostCfg *container.HostConfig, sandboxID string) {
	if s.opts.DockerLogLimit.MaxSize == "" {
		return
	}
	info, err := s.runtimes.get(ctx)
	if err != nil {
		s.log.Debugf("Docker's log driver unknown (%v): its log is not bounded", err)
		return
	}
	if info.LoggingDriver != jsonFileDriver {
		return
	}
	driver, opts, err := s.daemonLogOpts.get(ctx, s.docker.InspectContainer, sandboxID)
	if err != nil {
		s.log.WithField("sandbox", sandboxID).Debugf("Docker's default log options unknown (%v): its log is not bounded", err)
		return
	}
	if driver != info.LoggingDriver {
		opts = nil // the sandbox predates a change of the daemon's driver: its options say nothing
	}
	hostCfg.LogConfig = dockerLogConfig(s.opts.DockerLogLimit, info.LoggingDriver, opts)
}
