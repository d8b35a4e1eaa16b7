package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/core"
	"github.com/cri-dockerd/cri-dockerd/internal/kerneloom"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/metrics"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
	"github.com/cri-dockerd/cri-dockerd/internal/nri"
	"github.com/cri-dockerd/cri-dockerd/internal/replycodec"
	"github.com/cri-dockerd/cri-dockerd/internal/runtimecgroups"
	"github.com/cri-dockerd/cri-dockerd/internal/standby"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
	"github.com/cri-dockerd/cri-dockerd/internal/streaming"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
	"github.com/cri-dockerd/cri-dockerd/internal/version"
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
	// Metrics are opt-in; the service they count exists once Docker answered.
	var built atomic.Pointer[core.Service]
	var m *metrics.Metrics
	dockerOpts := libdocker.Options{Endpoint: cfg.DockerEndpoint, RequestTimeout: cfg.RuntimeRequestTimeout, Logger: log}
	if cfg.MetricsBindAddr != "" {
		m = metrics.New(metrics.Sources{
			PodsByHandler: func() map[string]int {
				if svc := built.Load(); svc != nil {
					return svc.PodsByHandler()
				}
				return nil
			},
			LogFollowers: func() int {
				if svc := built.Load(); svc != nil {
					return svc.LogFollowers()
				}
				return 0
			},
		})
		dockerOpts.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return metrics.DockerTransport(rt, m.ObserveDocker) }
	}
	docker, err := libdocker.New(dockerOpts)
	if err != nil {
		return fmt.Errorf("docker client for %s: %w", cfg.DockerEndpoint, err)
	}
	// Sandboxes and containers in memory, kept current by Docker's events: the kubelet's
	// relists and status calls cost Docker nothing. Filled before the service is built, and the
	// one follower of Docker's events (core's GetContainerEvents subscribes to it).
	containers := store.Wrap(docker, store.Options{Label: core.TrackedLabel, Logger: log})
	defer containers.Close()
	streamOpts := streaming.Options{BindAddr: cfg.StreamingBindAddr, Docker: containers, Logger: log}
	if m != nil {
		streamOpts.OnSession = func(kind string, delta int) { m.StreamingSessions.WithLabelValues(kind).Add(float64(delta)) }
	}
	// The metrics of the service's background work (nil without metrics).
	var statsRefreshed func(time.Duration, bool)
	var logWriteFailed func()
	if m != nil {
		statsRefreshed, logWriteFailed = m.ObserveStatsRefresh, m.LogWriteFailed
	}
	streams, err := streaming.NewServer(streamOpts)
	if err != nil {
		return err
	}
	defer streams.Stop()
	netPlugin, err := newNetworkPlugin(cfg, log)
	if err != nil {
		return err
	}
	defer netPlugin.Close()
	// The kubelet's relist of a quiet node is the same reply each second: encoded once.
	replies := replycodec.New()
	if cfg.RuntimeCgroups != "" {
		keeper := runtimecgroups.New(cfg.RuntimeCgroups, log.WithField("component", "runtime-cgroups"))
		go supervise.Run(log, "--runtime-cgroups keeper", func() { keeper.Run(ctx, runtimecgroups.Interval) })
	}
	if cfg.IPv6DualStack {
		log.Debug("--ipv6-dual-stack: pods get the IPv4 and IPv6 addresses of their CNI result (always the case)")
	}

	// The socket serves at once, Docker or not: until the service is built, the gate answers
	// Version (Docker's version "unknown"), Status not ready and the rest Unavailable, so that
	// systemd's start limit never gives up on a Docker slow to come, and clients that check the
	// connection with Version (the kubelet, crictl) get on to Status.
	gate := standby.New(core.VersionAnswer(core.UnknownDockerVersion), core.DockerDaemonNotReady, "connecting to docker at "+cfg.DockerEndpoint)
	lis, socketPath, err := listen(cfg.ContainerRuntimeEndpoint, log)
	if err != nil {
		return err
	}
	unary := []grpc.UnaryServerInterceptor{core.RecoverUnary(log), core.LogErrors(log)}
	stream := []grpc.StreamServerInterceptor{core.RecoverStream(log)}
	if m != nil {
		unary = append([]grpc.UnaryServerInterceptor{m.UnaryInterceptor()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{m.StreamInterceptor()}, stream...)
		addr, metricsDone, err := m.Serve(ctx, cfg.MetricsBindAddr, cfg.EnablePprof)
		if err != nil {
			return fmt.Errorf("--metrics-bind-addr %s: %w", cfg.MetricsBindAddr, err)
		}
		go func() {
			if err := <-metricsDone; err != nil {
				log.Errorf("metrics server: %v", err)
			}
		}()
		logMetricsListening(log, addr, cfg.MetricsBindAddr, cfg.EnablePprof)
	}
	server := grpc.NewServer(grpc.ForceServerCodecV2(replies),
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)
	gate.Register(server)

	served := make(chan error, 1)
	go func() { served <- server.Serve(lis) }()
	streamsServed := make(chan error, 1)
	go func() { streamsServed <- streams.Serve() }()
	log.WithField("url", streams.URL()).Info("streaming server (exec, attach, port-forward) listening")
	log.WithFields(logrus.Fields{"endpoint": cfg.ContainerRuntimeEndpoint, "docker": cfg.DockerEndpoint}).Info("CRI socket listening; connecting to docker")
	notifySystemd(log, daemon.SdNotifyReady+"\nSTATUS=connecting to docker at "+cfg.DockerEndpoint)

	// The kernel's OOM kills that Docker missed (kerneloom). Without its log (no CAP_SYSLOG, or a
	// node container without /dev/kmsg) Docker's oom events are all there is.
	var kernelLog io.Reader
	if kmsg, err := kerneloom.Open(); err != nil {
		log.Infof("not following the kernel's OOM kills in %s: %v", kerneloom.Path, err)
	} else {
		defer kmsg.Close() // after the service's Close, below
		kernelLog = kmsg
	}

	connectCtx, cancelConnect := context.WithCancel(ctx)
	defer cancelConnect()
	connected := make(chan *core.Service, 1)
	go func() {
		connected <- connect(connectCtx, cfg, log, gate, containers, func(ctx context.Context) (*core.Service, error) {
			return core.New(ctx, docker, core.Options{
				Store:                        containers,
				PodInfraImage:                cfg.PodInfraContainerImage,
				ImagePullProgressDeadline:    cfg.ImagePullProgressDeadline,
				RuntimeHandlerAliases:        cfg.RuntimeHandlerAliases,
				DefaultRuntimeHandler:        cfg.DefaultRuntimeHandler,
				PrivilegedWithoutHostDevices: handlerSet(cfg.PrivilegedWithoutHostDevices),
				NetworkPlugin:                cfg.NetworkPlugin,
				Network:                      netPlugin,
				RootDirectory:                cfg.RootDirectory,
				CheckpointDirectory:          cfg.CheckpointDirectory,
				PodCIDR:                      cfg.PodCIDR,
				HairpinVeth:                  cfg.HairpinMode != config.HairpinNone && cfg.NetworkPlugin != network.CNIPluginName,
				Streaming:                    streams,
				Logger:                       logger,
				KeepReply:                    replies.Keep,
				ConcurrentStarts:             cfg.ConcurrentStarts(runtime.NumCPU()),
				DockerLogLimit:               core.DockerLogLimit{MaxSize: cfg.DockerLogLimit(), MaxFile: cfg.DockerLogMaxFile},
				MaxContainerLogLineSize:      cfg.MaxContainerLogLineSize,
				StatsRefreshed:               statsRefreshed,
				LogWriteFailed:               logWriteFailed,
				KernelLog:                    kernelLog,
				NRI: nri.Config{
					Enable: cfg.NRI, SocketPath: cfg.NRISocket, PluginPath: cfg.NRIPluginPath, PluginConfigPath: cfg.NRIPluginConfigPath,
					RegistrationTimeout: cfg.NRIPluginRegistrationTimeout, RequestTimeout: cfg.NRIPluginRequestTimeout,
					DisableConnections: cfg.NRIDisableConnections,
				},
			})
		})
	}()
	// The service, once built, is closed last of all (after the server stopped).
	defer func() {
		cancelConnect()
		if connected != nil {
			if svc := <-connected; svc != nil {
				svc.Close()
			}
		}
		if svc := built.Load(); svc != nil {
			svc.Close()
		}
	}()

	for done := false; !done; {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case err := <-streamsServed:
			return fmt.Errorf("streaming server: %w", err)
		case <-ctx.Done():
			done = true
		case svc := <-connected:
			connected = nil
			if svc == nil { // ctx ended while connecting
				continue
			}
			built.Store(svc)
			gate.Serve(svc)
			log.WithFields(logrus.Fields{"endpoint": cfg.ContainerRuntimeEndpoint, "docker": cfg.DockerEndpoint, "docker_api": docker.APIVersion(), "version": version.Version}).Info("cri-dockerd serving")
			notifySystemd(log, "STATUS=serving")
		}
	}
	log.Info("shutting down")
	notifySystemd(log, daemon.SdNotifyStopping)
	stopped := make(chan struct{})
	go func() { server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		server.Stop()
	}
	if socketPath != "" {
		_ = os.Remove(socketPath)
	}
	return nil
}

// logMetricsListening says what the metrics listener serves, and warns when it is reachable
// from other hosts: neither /metrics nor /debug/pprof has authentication.
func logMetricsListening(log *logrus.Entry, addr net.Addr, bindAddr string, pprof bool) {
	log.WithFields(logrus.Fields{"address": addr.String(), "pprof": pprof}).Info("metrics listening")
	if metrics.LoopbackOnly(bindAddr) {
		return
	}
	served := "/metrics"
	if pprof {
		served = "/metrics and /debug/pprof"
	}
	log.Warnf("--metrics-bind-addr %s is not a loopback address: anyone who reaches the port reads %s, with no authentication; "+
		"bind 127.0.0.1, or let only Prometheus reach the port (a firewall rule)", bindAddr, served)
}

// connectBackoff bounds the wait between attempts to reach Docker; connectLogEvery how often
// a Docker that stays away is logged again.
const (
	connectBackoffMin = 250 * time.Millisecond
	connectBackoffMax = 5 * time.Second
	connectLogEvery   = 30 * time.Second
)

// connect waits for Docker and builds the service, trying again until it succeeds; nil once
// ctx ended. Each failure is what Status says, and is logged when it is new or every
// connectLogEvery.
func connect(ctx context.Context, cfg *config.Config, log *logrus.Entry, gate *standby.Gate, containers *store.Store, build func(context.Context) (*core.Service, error)) *core.Service {
	began := time.Now()
	backoff := connectBackoffMin
	var lastMsg string
	var lastLog time.Time
	filling := false
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, cfg.RuntimeRequestTimeout)
		svc, err := connectOnce(attemptCtx, cfg, log, containers, &filling, build)
		cancel()
		if err == nil {
			if !lastLog.IsZero() {
				log.Infof("connected to docker at %s after %v", cfg.DockerEndpoint, time.Since(began).Round(time.Millisecond))
			}
			return svc
		}
		if ctx.Err() != nil {
			return nil
		}
		msg := err.Error()
		gate.Waiting(core.DockerDaemonNotReady, msg+" (retrying)")
		if msg != lastMsg || time.Since(lastLog) >= connectLogEvery {
			log.Warnf("%s; retrying, serving Version, Status not ready and Unavailable until then (waiting %v)", msg, time.Since(began).Round(time.Second))
			lastMsg, lastLog = msg, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, connectBackoffMax)
	}
}

// connectOnce pings Docker, starts filling the container store (once), and builds the service.
func connectOnce(ctx context.Context, cfg *config.Config, log *logrus.Entry, containers *store.Store, filling *bool, build func(context.Context) (*core.Service, error)) (*core.Service, error) {
	if err := containers.Docker().Ping(ctx); err != nil {
		return nil, fmt.Errorf("docker at %s is not reachable: %w", cfg.DockerEndpoint, err)
	}
	if !*filling {
		*filling = true
		if err := containers.Start(ctx, time.Second); err != nil {
			// Docker answers, but not about every container (an inspect that hangs on a stuck
			// runtime): serve anyway; reads go to Docker until the store's next relist succeeds.
			log.Warnf("container store not filled (%v): lists and status calls go to Docker until it is", err)
		} else {
			log.WithField("containers", containers.Len()).Debug("container store filled from docker")
		}
	}
	svc, err := build(ctx)
	if err != nil {
		return nil, fmt.Errorf("start the service: %w", err)
	}
	return svc, nil
}

// listen opens the CRI endpoint and returns the path of a socket file that is ours to remove
// at shutdown ("" when systemd owns it). Sockets systemd passes (LISTEN_FDS) are used first:
// fd:// takes the first unix one (or the one named fd://NAME), and unix://PATH takes the one
// bound to PATH, as kubespray's cri-dockerd.socket + `--container-runtime-endpoint unix://...`
// layout expects. Without a passed socket we bind PATH ourselves.
func listen(endpoint string, log *logrus.Entry) (net.Listener, string, error) {
	ep, err := config.ParseEndpoint(endpoint)
	if err != nil {
		return nil, "", err
	}
	if ep.Bare {
		log.Warnf("--container-runtime-endpoint %s: a path without unix:// is deprecated (as upstream); use unix://%s", endpoint, endpoint)
	}
	passed, err := activation.ListenersWithNames()
	if err != nil {
		return nil, "", fmt.Errorf("sockets passed by systemd (LISTEN_FDS): %w", err)
	}
	lis, err := pickPassedListener(passed, ep)
	if err != nil {
		return nil, "", fmt.Errorf("--container-runtime-endpoint %s: %w", endpoint, err)
	}
	closeOthers(passed, lis)
	if lis != nil {
		log.WithField("address", lis.Addr().String()).Info("serving the socket systemd passed")
		return lis, "", nil
	}
	lis, err = listenUnix(ep.Path)
	return lis, ep.Path, err
}

// pickPassedListener chooses among the sockets systemd passed (by FileDescriptorName): nil
// when none fits a unix:// endpoint, an error when fd:// finds none.
func pickPassedListener(passed map[string][]net.Listener, ep config.Endpoint) (net.Listener, error) {
	names := make([]string, 0, len(passed))
	for name := range passed {
		names = append(names, name)
	}
	sort.Strings(names)
	var addrs []string
	for _, name := range names {
		for _, l := range passed[name] {
			if l == nil || l.Addr().Network() != "unix" {
				continue
			}
			addrs = append(addrs, l.Addr().String())
			switch {
			case ep.Activated && (ep.FDName == "" || ep.FDName == name):
				return l, nil
			case !ep.Activated && sameSocketPath(l.Addr().String(), ep.Path):
				return l, nil
			}
		}
	}
	if !ep.Activated {
		return nil, nil
	}
	if ep.FDName != "" {
		return nil, fmt.Errorf("systemd passed no unix socket named %q (FileDescriptorName=); it passed %v", ep.FDName, names)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("systemd passed no unix socket (LISTEN_FDS); start cri-docker.service through cri-docker.socket, or use unix://PATH")
	}
	return nil, fmt.Errorf("no passed socket fits")
}

// sameSocketPath compares socket paths through symlinked directories: kubespray's unit binds
// %t/cri-dockerd.sock (/run) while its ExecStart names /var/run/cri-dockerd.sock.
func sameSocketPath(a, b string) bool {
	resolve := func(p string) string {
		p = filepath.Clean(p)
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			return filepath.Join(dir, filepath.Base(p))
		}
		return p
	}
	return resolve(a) == resolve(b)
}

// closeOthers closes the passed sockets we do not serve: systemd keeps its own copies.
func closeOthers(passed map[string][]net.Listener, keep net.Listener) {
	for _, ls := range passed {
		for _, l := range ls {
			if l != nil && l != keep {
				l.Close()
			}
		}
	}
}

// notifySystemd tells systemd (Type=notify) our state; it does nothing outside systemd.
func notifySystemd(log *logrus.Entry, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warnf("sd_notify %s: %v", state, err)
	}
}

// newNetworkPlugin builds the --network-plugin: CNI, or Docker's default bridge for "" and none.
func newNetworkPlugin(cfg *config.Config, log *logrus.Entry) (network.Plugin, error) {
	if cfg.NetworkPlugin != network.CNIPluginName {
		return network.NewDockerBridge(cfg.NetworkPlugin), nil
	}
	plugin, err := network.NewCNI(network.CNIOptions{
		ConfDir:  cfg.CNIConfDir,
		BinDirs:  cfg.CNIBinDirs,
		CacheDir: cfg.CNICacheDir,
		MTU:      cfg.NetworkPluginMTU,
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	if err := plugin.Status(); err != nil {
		log.Warnf("%v; pods wait until a CNI network config is in %s (NetworkReady is false until then)", err, cfg.CNIConfDir)
	}
	return plugin, nil
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

// handlerSet is a set of runtime handler names.
func handlerSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}
