// Package config holds cri-dockerd's settings: defaults, command-line flags (compatible with
// upstream cri-dockerd where a flag exists there), an optional config file with the same keys
// as the flags, and validation.
package config

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/network/podcidr"
)

// Defaults shared with upstream cri-dockerd, so that systemd units and deployment tools that
// rely on them keep working after a swap of the binary.
const (
	DefaultCRIEndpoint    = "unix:///var/run/cri-dockerd.sock"
	DefaultDockerEndpoint = "unix:///var/run/docker.sock"
	DefaultRootDirectory  = "/var/lib/cri-dockerd"
	// DefaultCheckpointDirectory is where the kubelet (root dir /var/lib/kubelet) asks for
	// container checkpoint archives.
	DefaultCheckpointDirectory    = "/var/lib/kubelet/checkpoints"
	DefaultPodInfraImage          = "registry.k8s.io/pause:3.10"
	DefaultRuntimeRequestTimeout  = 2 * time.Minute
	DefaultImagePullProgressLimit = time.Minute
	// DefaultRuntimeHandlerName is the handler name that means "Docker's default runtime", besides "".
	DefaultRuntimeHandlerName = "docker"
	// DefaultStreamingBindAddr is loopback and a free port: never every interface by default.
	DefaultStreamingBindAddr = "127.0.0.1:0"
	// DefaultNetworkPlugin is CNI, as upstream; "" (or "none") is Docker's default bridge.
	DefaultNetworkPlugin = "cni"
	DefaultCNIConfDir    = "/etc/cni/net.d"
	DefaultCNICacheDir   = "/var/lib/cni/cache"
	// DefaultHairpinMode is upstream's: its flag's zero value reads as "none".
	DefaultHairpinMode = HairpinNone
	// DefaultDockerLogMaxSize and DefaultDockerLogMaxFile bound Docker's own copy of each
	// container's log to 30 MB, the kubelet's default for its CRI files being 50 MiB.
	DefaultDockerLogMaxSize = "10m"
	DefaultDockerLogMaxFile = 3
	// DefaultNRISocket, DefaultNRIPluginPath and DefaultNRIPluginConfigPath are NRI's own
	// defaults, as containerd's and CRI-O's.
	DefaultNRISocket           = "/var/run/nri/nri.sock"
	DefaultNRIPluginPath       = "/opt/nri/plugins"
	DefaultNRIPluginConfigPath = "/etc/nri/conf.d"
	// DefaultMaxContainerLogLineSize is containerd's default max_container_log_line_size.
	DefaultMaxContainerLogLineSize = 16 << 10
	// maxContainerLogLineSizeLimit bounds the flag: each container with output holds a line.
	maxContainerLogLineSizeLimit = 16 << 20
)

// Hairpin modes of --hairpin-mode, upstream's names.
const (
	HairpinVeth              = "hairpin-veth"
	HairpinPromiscuousBridge = "promiscuous-bridge"
	HairpinNone              = "none"
)

// DefaultCNIBinDirs are searched for CNI plugins in order: upstream's directory, then Debian's
// (package containernetworking-plugins), so that a Debian node works out of the box.
var DefaultCNIBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}

// Config is everything cri-dockerd needs to serve.
type Config struct {
	ContainerRuntimeEndpoint  string
	DockerEndpoint            string
	RootDirectory             string
	CheckpointDirectory       string
	PodInfraContainerImage    string
	RuntimeRequestTimeout     time.Duration
	ImagePullProgressDeadline time.Duration
	NetworkPlugin             string
	CNIBinDirs                []string
	CNIConfDir                string
	CNICacheDir               string
	NetworkPluginMTU          int // > 0: the MTU of the pods' interface in the CNI config
	LogLevel                  string
	// RuntimeHandlerAliases maps a RuntimeClass handler name to a Docker runtime name.
	RuntimeHandlerAliases map[string]string
	// DefaultRuntimeHandler is the handler name that selects Docker's default runtime.
	DefaultRuntimeHandler string
	// PrivilegedWithoutHostDevices lists the handlers whose privileged containers get every
	// privilege except the node's devices (containerd's privileged_without_host_devices):
	// for VM runtimes, where host devices mean nothing inside the guest or must not leak in.
	PrivilegedWithoutHostDevices []string
	// MetricsBindAddr is where Prometheus metrics are served; "" is off.
	MetricsBindAddr string
	// EnablePprof adds Go's /debug/pprof to the metrics listener. Off by default: profiles
	// show the process's memory and command line, and a CPU profile or trace costs CPU, to
	// anyone who reaches the port.
	EnablePprof bool
	// StreamingBindAddr is where the exec/attach/port-forward server listens (HOST:PORT, HOST, :PORT).
	StreamingBindAddr string
	// PodCIDR is the pod CIDR (comma-separated for dual stack) given to CNI as ipRanges until
	// the kubelet sends one with UpdateRuntimeConfig (upstream's --pod-cidr).
	PodCIDR string
	// IPv6DualStack is upstream's --ipv6-dual-stack: accepted; a pod is dual-stack when its CNI
	// result has both families, whatever this says.
	IPv6DualStack bool
	// HairpinMode is upstream's --hairpin-mode: hairpin-veth, promiscuous-bridge or none.
	HairpinMode string
	// RuntimeCgroups is the cgroup Docker's daemons (dockerd, containerd) are kept in, as
	// upstream's --runtime-cgroups; "" leaves them where they are.
	RuntimeCgroups string
	// MaxConcurrentStarts bounds the container starts asked of Docker at once: 0 is four times the
	// node's CPUs, -1 no bound.
	MaxConcurrentStarts int
	// DockerLogMaxSize is the max-size of Docker's json-file log of each container, set where
	// the daemon sets none; "" or "0" leaves Docker's settings alone.
	DockerLogMaxSize string
	// DockerLogMaxFile is the max-file that goes with DockerLogMaxSize.
	DockerLogMaxFile int
	// MaxContainerLogLineSize is the longest text of one line of a CRI log file; a longer
	// line is written as partial lines.
	MaxContainerLogLineSize int
	// NRI hosts the Node Resource Interface for plugins (containerd's [plugins."io.containerd.nri.v1.nri"]).
	NRI bool
	// NRISocket is where external NRI plugins connect.
	NRISocket string
	// NRIPluginPath holds NRI plugins to start; NRIPluginConfigPath their configuration.
	NRIPluginPath, NRIPluginConfigPath string
	// NRIPluginRegistrationTimeout bounds a plugin's registration, NRIPluginRequestTimeout
	// each of its answers.
	NRIPluginRegistrationTimeout, NRIPluginRequestTimeout time.Duration
	// NRIDisableConnections refuses external plugins: only those of NRIPluginPath run.
	NRIDisableConnections bool
}

// DockerLogLimit is DockerLogMaxSize, "" when off.
func (c *Config) DockerLogLimit() string {
	if c.DockerLogMaxSize == "0" {
		return ""
	}
	return c.DockerLogMaxSize
}

// ConcurrentStarts is the bound MaxConcurrentStarts means on a node of cpus CPUs (0: none).
func (c *Config) ConcurrentStarts(cpus int) int {
	switch {
	case c.MaxConcurrentStarts == 0:
		return 4 * cpus
	case c.MaxConcurrentStarts < 0:
		return 0
	}
	return c.MaxConcurrentStarts
}

// Default returns the configuration used when nothing is set.
func Default() *Config {
	return &Config{
		ContainerRuntimeEndpoint:     DefaultCRIEndpoint,
		DockerEndpoint:               DefaultDockerEndpoint,
		RootDirectory:                DefaultRootDirectory,
		CheckpointDirectory:          DefaultCheckpointDirectory,
		PodInfraContainerImage:       DefaultPodInfraImage,
		RuntimeRequestTimeout:        DefaultRuntimeRequestTimeout,
		ImagePullProgressDeadline:    DefaultImagePullProgressLimit,
		NetworkPlugin:                DefaultNetworkPlugin,
		CNIBinDirs:                   append([]string(nil), DefaultCNIBinDirs...),
		CNIConfDir:                   DefaultCNIConfDir,
		CNICacheDir:                  DefaultCNICacheDir,
		LogLevel:                     "info",
		RuntimeHandlerAliases:        map[string]string{},
		DefaultRuntimeHandler:        DefaultRuntimeHandlerName,
		StreamingBindAddr:            DefaultStreamingBindAddr,
		HairpinMode:                  DefaultHairpinMode,
		DockerLogMaxSize:             DefaultDockerLogMaxSize,
		DockerLogMaxFile:             DefaultDockerLogMaxFile,
		MaxContainerLogLineSize:      DefaultMaxContainerLogLineSize,
		NRI:                          true,
		NRISocket:                    DefaultNRISocket,
		NRIPluginPath:                DefaultNRIPluginPath,
		NRIPluginConfigPath:          DefaultNRIPluginConfigPath,
		NRIPluginRegistrationTimeout: 5 * time.Second,
		NRIPluginRequestTimeout:      2 * time.Second,
	}
}

// rfc1123Label is what Kubernetes allows as a RuntimeClass handler name.
var rfc1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// dockerRuntimeName is what Docker accepts as a runtime name in daemon.json (shim names have dots).
var dockerRuntimeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// IsValidHandlerName reports whether name can be a RuntimeClass handler.
func IsValidHandlerName(name string) bool {
	return len(name) <= 63 && rfc1123Label.MatchString(name)
}

// ParseRuntimeHandler parses one --runtime-handler value, NAME=DOCKER_RUNTIME.
func ParseRuntimeHandler(value string) (name, dockerRuntime string, err error) {
	name, dockerRuntime, ok := strings.Cut(value, "=")
	name, dockerRuntime = strings.TrimSpace(name), strings.TrimSpace(dockerRuntime)
	if !ok || name == "" || dockerRuntime == "" {
		return "", "", fmt.Errorf("runtime handler %q: want NAME=DOCKER_RUNTIME, e.g. spin=io.containerd.spin.v2", value)
	}
	if !IsValidHandlerName(name) {
		return "", "", fmt.Errorf("runtime handler %q: name %q is not a RuntimeClass handler name (an RFC 1123 label: lower case letters, digits and '-', at most 63 characters)", value, name)
	}
	if !dockerRuntimeName.MatchString(dockerRuntime) {
		return "", "", fmt.Errorf("runtime handler %q: %q is not a Docker runtime name", value, dockerRuntime)
	}
	return name, dockerRuntime, nil
}

// Validate checks the configuration and says what to fix.
func (c *Config) Validate() error {
	var problems []string
	if _, err := ParseEndpoint(c.ContainerRuntimeEndpoint); err != nil {
		problems = append(problems, err.Error())
	}
	if c.RootDirectory == "" {
		problems = append(problems, "--cri-dockerd-root-directory must not be empty")
	}
	if c.CheckpointDirectory != "" && (!filepath.IsAbs(c.CheckpointDirectory) || filepath.Clean(c.CheckpointDirectory) != c.CheckpointDirectory) {
		problems = append(problems, fmt.Sprintf("--checkpoint-directory %q must be an absolute, clean path (or empty: no checkpoints)", c.CheckpointDirectory))
	}
	if c.PodInfraContainerImage == "" {
		problems = append(problems, "--pod-infra-container-image must not be empty")
	}
	if c.RuntimeRequestTimeout <= 0 {
		problems = append(problems, "--runtime-request-timeout must be positive")
	}
	if c.MaxConcurrentStarts < -1 {
		problems = append(problems, "--max-concurrent-starts must be a number of starts, 0 (four times the CPUs) or -1 (no bound)")
	}
	if c.ImagePullProgressDeadline < 0 {
		problems = append(problems, "--image-pull-progress-deadline must not be negative")
	}
	switch c.NetworkPlugin {
	case "", "none":
	case "cni":
		if c.CNIConfDir == "" {
			problems = append(problems, "--cni-conf-dir must not be empty with --network-plugin=cni")
		}
		if len(c.CNIBinDirs) == 0 || slices.Contains(c.CNIBinDirs, "") {
			problems = append(problems, "--cni-bin-dir: give one or more directories with --network-plugin=cni")
		}
	default:
		problems = append(problems, fmt.Sprintf("--network-plugin %q: use \"cni\" (CNI plugins) or \"\" / \"none\" (Docker's default bridge)", c.NetworkPlugin))
	}
	if c.MetricsBindAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsBindAddr); err != nil {
			problems = append(problems, fmt.Sprintf("--metrics-bind-addr %q: want HOST:PORT, e.g. 127.0.0.1:9099", c.MetricsBindAddr))
		}
	} else if c.EnablePprof {
		problems = append(problems, "--enable-pprof serves /debug/pprof on the metrics listener, and there is none: add --metrics-bind-addr HOST:PORT (e.g. 127.0.0.1:9099), or drop --enable-pprof")
	}
	if c.NetworkPluginMTU < 0 || c.NetworkPluginMTU > 65535 {
		problems = append(problems, fmt.Sprintf("--network-plugin-mtu %d: want 0 (the plugin's default) or an MTU up to 65535", c.NetworkPluginMTU))
	} else if c.NetworkPluginMTU > 0 && c.NetworkPluginMTU < 576 {
		problems = append(problems, fmt.Sprintf("--network-plugin-mtu %d: an MTU below 576 cannot carry IPv4", c.NetworkPluginMTU))
	}
	if err := validateBindAddr(c.StreamingBindAddr); err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		problems = append(problems, fmt.Sprintf("--log-level %q: %v", c.LogLevel, err))
	}
	if c.DefaultRuntimeHandler != "" && !IsValidHandlerName(c.DefaultRuntimeHandler) {
		problems = append(problems, fmt.Sprintf("default runtime handler %q is not an RFC 1123 label", c.DefaultRuntimeHandler))
	}
	names := make([]string, 0, len(c.RuntimeHandlerAliases))
	for name := range c.RuntimeHandlerAliases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, _, err := ParseRuntimeHandler(name + "=" + c.RuntimeHandlerAliases[name]); err != nil {
			problems = append(problems, err.Error())
		}
		if name == c.DefaultRuntimeHandler {
			problems = append(problems, fmt.Sprintf("runtime handler %q: the name is reserved for Docker's default runtime", name))
		}
	}
	for _, name := range c.PrivilegedWithoutHostDevices {
		if !IsValidHandlerName(name) {
			problems = append(problems, fmt.Sprintf("--privileged-without-host-devices %q: not a RuntimeClass handler name (an RFC 1123 label)", name))
		}
	}
	if c.PodCIDR != "" {
		if _, err := podcidr.Parse(c.PodCIDR); err != nil {
			problems = append(problems, fmt.Sprintf("--pod-cidr %q: %v", c.PodCIDR, err))
		}
	}
	switch c.HairpinMode {
	case HairpinVeth, HairpinPromiscuousBridge, HairpinNone:
	default:
		problems = append(problems, fmt.Sprintf("--hairpin-mode %q: want one of %q, %q, %q", c.HairpinMode, HairpinVeth, HairpinPromiscuousBridge, HairpinNone))
	}
	if c.RuntimeCgroups != "" && (!strings.HasPrefix(c.RuntimeCgroups, "/") || strings.Contains(c.RuntimeCgroups, "..") || c.RuntimeCgroups == "/") {
		problems = append(problems, fmt.Sprintf("--runtime-cgroups %q: want an absolute cgroup name below the root, e.g. /system.slice/docker.service", c.RuntimeCgroups))
	}
	if size := c.DockerLogLimit(); size != "" {
		if n, err := units.FromHumanSize(size); err != nil || n <= 0 {
			problems = append(problems, fmt.Sprintf("--docker-log-max-size %q: want a size Docker takes, e.g. 10m, or 0 to leave Docker's log settings alone", size))
		}
		if c.DockerLogMaxFile < 1 {
			problems = append(problems, fmt.Sprintf("--docker-log-max-file %d: want 1 or more files", c.DockerLogMaxFile))
		}
	}
	if c.MaxContainerLogLineSize < 1 || c.MaxContainerLogLineSize > maxContainerLogLineSizeLimit {
		// containerd reads -1 as no limit; here a line always has one, or a container's
		// endless line would take the runtime's memory.
		problems = append(problems, fmt.Sprintf("--max-container-log-line-size %d: want 1 to %d bytes (a line is always cut: a container that writes without a newline must not fill our memory)", c.MaxContainerLogLineSize, maxContainerLogLineSizeLimit))
	}
	if c.NRI {
		for _, f := range []struct{ flag, path string }{
			{"--nri-socket", c.NRISocket}, {"--nri-plugin-path", c.NRIPluginPath}, {"--nri-plugin-config-path", c.NRIPluginConfigPath},
		} {
			if !filepath.IsAbs(f.path) {
				problems = append(problems, fmt.Sprintf("%s %q: want an absolute path", f.flag, f.path))
			}
		}
		if c.NRIPluginRegistrationTimeout <= 0 || c.NRIPluginRequestTimeout <= 0 {
			problems = append(problems, fmt.Sprintf("--nri-plugin-registration-timeout %s, --nri-plugin-request-timeout %s: both must be positive", c.NRIPluginRegistrationTimeout, c.NRIPluginRequestTimeout))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid configuration:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// validateBindAddr checks --streaming-bind-addr: HOST:PORT, :PORT, or a bare HOST (a free
// port); "" means the default.
func validateBindAddr(addr string) error {
	if addr == "" {
		return nil
	}
	hostport := addr
	if _, _, err := net.SplitHostPort(addr); err != nil {
		hostport = net.JoinHostPort(strings.Trim(addr, "[]"), "0")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || strings.ContainsAny(host, " /[]") {
		return fmt.Errorf("--streaming-bind-addr %q: want HOST:PORT, HOST or :PORT", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--streaming-bind-addr %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}
