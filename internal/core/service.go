// Package core implements the CRI RuntimeService and ImageService on top of the Docker Engine.
// One file per RPC family; the RuntimeClass handler resolution lives in runtime_handler.go and
// the naming and labelling of Docker objects in naming.go.
package core

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/containerlog"
	"github.com/cri-dockerd/cri-dockerd/internal/core/startgate"
	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
	"github.com/cri-dockerd/cri-dockerd/internal/kerneloom"
	"github.com/cri-dockerd/cri-dockerd/internal/keyedmutex"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
	"github.com/cri-dockerd/cri-dockerd/internal/nri"
	"github.com/cri-dockerd/cri-dockerd/internal/procuser"
	"github.com/cri-dockerd/cri-dockerd/internal/stats"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
)

// CRIAPIVersion is the CRI API version this server speaks.
const CRIAPIVersion = "v1"

// Options are the settings core needs; cmd builds them from config.Config.
type Options struct {
	PodInfraImage             string
	ImagePullProgressDeadline time.Duration
	// RuntimeHandlerAliases maps RuntimeClass handler names to Docker runtime names.
	RuntimeHandlerAliases map[string]string
	// DefaultRuntimeHandler is the handler name that, like "", selects Docker's default runtime.
	DefaultRuntimeHandler string
	// PrivilegedWithoutHostDevices holds the handlers whose privileged containers get every
	// privilege except the node's devices (see container_security.go).
	PrivilegedWithoutHostDevices map[string]bool
	// NetworkPlugin is the --network-plugin value, reported by Status; Network serves it.
	NetworkPlugin string
	// Network networks sandboxes; nil is Docker's default bridge. A namespaced plugin (CNI)
	// needs RootDirectory for the sandbox checkpoints.
	Network network.Plugin
	// RuntimeInfoMaxAge bounds how stale the cached Docker /info may be for Status; a lookup of
	// an unknown runtime refreshes it sooner (see runtime_handler.go).
	RuntimeInfoMaxAge time.Duration
	// StatusTimeout bounds the Docker calls of Status and Version; 0 is StatusTimeout.
	StatusTimeout time.Duration
	// HairpinVeth turns hairpin on for each pod's veth on Docker's bridge (--hairpin-mode
	// hairpin-veth or promiscuous-bridge with --network-plugin ""). CNI plugins have their own
	// setting (the bridge plugin's hairpinMode).
	HairpinVeth bool
	// PodCIDR is --pod-cidr: the network plugin's pod CIDR until the kubelet sends one.
	PodCIDR string
	// RootDirectory holds state that Docker cannot keep for us (log positions, checkpoints).
	RootDirectory string
	// CheckpointDirectory is the one directory CheckpointContainer writes archives into (the
	// kubelet's checkpoints directory); "" refuses every location.
	CheckpointDirectory string
	// Streaming serves exec, attach and port-forward sessions; nil answers Unimplemented.
	Streaming StreamingServer
	// Logger defaults to logrus' standard logger.
	Logger *logrus.Logger
	// KeepReply, when set, is told of each whole list that ListPodSandbox or ListContainers
	// built and will reply unchanged until the next change (replycodec.Codec.Keep).
	KeepReply func(proto.Message)
	// ConcurrentStarts bounds the container starts asked of Docker at once (startgate); 0 is
	// no bound.
	ConcurrentStarts int
	// DockerLogLimit bounds Docker's own log of each container (container_log_config.go).
	DockerLogLimit DockerLogLimit
	// MaxContainerLogLineSize is the longest text of a CRI log line (0: 16 KiB); a longer
	// line is written as partial lines.
	MaxContainerLogLineSize int
	// Store is the container store in front of New's docker (store.Wrap of it): core's calls
	// go through it, and its events feed GetContainerEvents. Nil: core's calls go to docker,
	// and an events-only store of core's own follows Docker's events (store.go).
	Store ContainerStore
	// StatsRefreshed, when set, is told of each container stats refresh (stats.Config.OnRefresh),
	// and LogWriteFailed of each write to a CRI log file that failed
	// (containerlog.Manager.WriteFailed): for the metrics.
	StatsRefreshed func(d time.Duration, failed bool)
	LogWriteFailed func()
	// KernelLog is the kernel's log (kerneloom.Open), followed for OOM kills Docker did not
	// tell of (kerneloom); nil: Docker's oom events alone.
	KernelLog io.Reader
	// NRI is the Node Resource Interface's configuration (internal/nri); off when not Enable.
	NRI nri.Config

	// imageVolumeMounter replaces mount(2) for image volumes in tests.
	imageVolumeMounter imagevolume.Mounter
	// hairpin replaces network.EnableHairpin in tests.
	hairpin func(pid int) error
}

// StreamingServer hands out the URLs of streaming sessions (k8s.io/cri-streaming's Server).
type StreamingServer interface {
	GetExec(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(*runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// Service serves the CRI RuntimeService and ImageService.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	// nri hosts NRI's plugins (nil: off); nriState says why it is off; nriPending holds the
	// sandboxes whose RunPodSandbox hook runs.
	nri        *nri.Host
	nriState   string
	nriPending nriPending

	docker libdocker.Client
	// store is Options.Store, or the events-only store of ownStore.
	store    ContainerStore
	ownStore *store.Store
	opts     Options
	log      *logrus.Entry
	runtimes *runtimeCache
	// lastVersion is the Docker version last answered, for Version while Docker does not answer.
	lastVersion atomic.Pointer[string]
	// sandboxes maps sandbox ID to the runtime its pod runs on, so that CreateContainer never
	// has to inspect the sandbox; rebuilt from Docker labels at start.
	sandboxes     *sandboxIndex
	daemonLogOpts *daemonLogOpts
	// clampOOMScore is set when the node cannot give containers a negative oom_score_adj.
	clampOOMScore bool
	imageRemoval  sync.Mutex
	diskUsage     *diskUsageCache
	// starts admits the Docker starts of sandboxes and containers (startgate).
	starts *startgate.Gate
	// layers is where image and writable layers live, and their inode count (imagefs.go).
	layers *layersRoots
	logs   *containerlog.Manager
	// net networks sandboxes; checkpoints keep what it needs to tear a pod down and the pod's
	// IPs (nil without a root directory); netLocks serialise set up and tear down per sandbox.
	net         network.Plugin
	checkpoints *checkpointStore
	pins        netnsPinner
	netLocks    keyedmutex.Mutex
	// once logs each kind of unsupported request once (see container_resources.go).
	once onceLogger
	// stats holds container stats samples, refreshed in the background (internal/stats).
	stats *stats.Collector
	// events follows the store's events for GetContainerEvents (events.go).
	events *eventBroker
	// imageVolumes knows which containers mount which images (internal/imagevolume); rebuilt
	// from container labels at start.
	imageVolumes *imagevolume.Manager
	// users keeps the identity each container's first process ran with (container_user.go).
	users procuser.Cache
	// ooms are the containers Docker told an oom event of (oom.go).
	ooms oomKills
	// sandboxList and containerList are the whole lists last built, given again while nothing
	// they are made of changed (list_cache.go). Never changed once built: callers share them.
	sandboxList   keptListCache[*runtimeapi.ListPodSandboxResponse]
	containerList keptListCache[*runtimeapi.ListContainersResponse]
	// adoptions is the state of adopting upstream cri-dockerd's sandboxes (sandbox_adopt.go).
	adoptions adoption
	// repairs remembers the sandboxes whose checkpoint could not be rebuilt
	// (sandbox_checkpoint_repair.go).
	repairs checkpointRepairs
	// logDirectoryExists replaces the check of a pod's log directory in unit tests, whose
	// kubelet-like log directories do not exist; nil checks the file system.
	logDirectoryExists func(dir string) error
	// hostDirMaker replaces the creation of a missing host path in unit tests, which must not
	// create directories outside their own; nil creates it (createMissingHostPaths).
	hostDirMaker func(path string) error
}

// New builds the service and rebuilds its in-memory state from Docker. It fails when Docker
// cannot be reached, since nothing could be served.
func New(ctx context.Context, docker libdocker.Client, opts Options) (*Service, error) {
	if opts.Logger == nil {
		opts.Logger = logrus.StandardLogger()
	}
	if opts.RuntimeInfoMaxAge <= 0 {
		opts.RuntimeInfoMaxAge = time.Minute
	}
	if opts.StatusTimeout <= 0 {
		opts.StatusTimeout = StatusTimeout
	}
	if opts.RuntimeHandlerAliases == nil {
		opts.RuntimeHandlerAliases = map[string]string{}
	}
	if opts.Network == nil {
		opts.Network = network.NewDockerBridge(opts.NetworkPlugin)
	}
	if opts.hairpin == nil {
		opts.hairpin = func(pid int) error { return network.EnableHairpin("/", pid) }
	}
	log := logrus.NewEntry(opts.Logger)
	var own *store.Store
	st := opts.Store
	if st != nil {
		docker = st
	} else {
		own = eventsOnlyStore(docker, log)
		st = own
	}
	s := &Service{
		docker:        docker,
		store:         st,
		ownStore:      own,
		opts:          opts,
		daemonLogOpts: &daemonLogOpts{maxAge: opts.RuntimeInfoMaxAge},
		log:           log,
		runtimes:      newRuntimeCache(docker, 5*time.Second),
		sandboxes:     newSandboxIndex(),
		diskUsage:     newDiskUsageCache(docker, diskUsageMaxAge),
		starts:        startgate.New(opts.ConcurrentStarts, startWaitBound),
		net:           opts.Network,
	}
	s.layers = newLayersRoots(s)
	s.stats = s.newStats(stats.Config{Docker: docker})
	s.events = newEventBroker(s)
	if err := s.openCheckpoints(); err != nil {
		return nil, err
	}
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	s.clampOOMScore = !negativeOOMScoreAllowed(info.Info, s.log)
	for name, rt := range opts.RuntimeHandlerAliases {
		if !info.knows(rt) {
			s.log.Warnf("runtime handler %q maps to Docker runtime %q, which Docker does not know yet (known: %s); pods using it will fail until it is added to daemon.json", name, rt, info.names())
		}
	}
	if err := s.sandboxes.rebuild(ctx, docker); err != nil {
		return nil, fmt.Errorf("rebuild sandbox index from docker: %w", err)
	}
	s.adoptUpstreamSandboxes(ctx)
	s.cleanUpOrphanNetworks(ctx)
	s.removeGoneUpstreamCheckpoints(ctx)
	s.imageVolumes = imagevolume.New(imagevolume.Config{Docker: docker, Log: s.log, RootDirectory: opts.RootDirectory, Mounter: opts.imageVolumeMounter, DockerError: dockerError})
	if err := s.imageVolumes.Start(ctx); err != nil {
		return nil, fmt.Errorf("rebuild image volume index from docker: %w", err)
	}
	logState := ""
	if opts.RootDirectory != "" {
		logState = filepath.Join(opts.RootDirectory, "containerlogs")
	}
	// The log followers ask Docker itself whether a container stopped when its log stream
	// ends: the container store may not have seen the die event yet.
	if s.logs, err = containerlog.NewManager(st.Docker(), logState, s.log); err != nil {
		s.imageVolumes.Close()
		return nil, err
	}
	s.logs.DockerLogPath = s.dockerLogPath
	s.logs.WriteFailed = opts.LogWriteFailed
	s.logs.MaxLineSize = opts.MaxContainerLogLineSize
	if err := s.followExistingLogs(ctx); err != nil {
		s.logs.Close()
		s.imageVolumes.Close()
		return nil, fmt.Errorf("resume container logs: %w", err)
	}
	if own != nil {
		// It keeps trying in the background should its first relist fail.
		if err := own.Start(ctx, time.Second); err != nil {
			s.log.Warnf("not following Docker's events yet (%v); retrying", err)
		}
	}
	s.events.start()
	if opts.KernelLog != nil {
		// It ends when its reader is closed (serve's, after the service).
		go supervise.Run(s.log, "following the kernel's OOM kills", func() {
			err := kerneloom.Follow(opts.KernelLog, s.ooms.mark)
			s.log.Debugf("no longer following the kernel's OOM kills: %v", err)
		})
	}
	// Until its first relist, the watcher would miss a sandbox removed now (see sandboxIndex.observe).
	select {
	case <-s.events.ready:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		s.log.Warn("not following the container store's events yet; continuing")
	}
	s.startNRI()
	return s, nil
}

// LogFollowers is how many containers' logs are being copied to their CRI log files, for the
// metrics.
func (s *Service) LogFollowers() int {
	return s.logs.Followers()
}

// Close stops the background work (log followers), after each has saved where it stands.
func (s *Service) Close() {
	s.nri.Stop()
	s.events.close()
	if s.ownStore != nil {
		s.ownStore.Close()
	}
	s.stats.Close()
	s.logs.Close()
	s.imageVolumes.Close()
}
