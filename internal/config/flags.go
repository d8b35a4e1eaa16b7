package config

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// handlerFlag is the repeatable --runtime-handler NAME=DOCKER_RUNTIME flag.
type handlerFlag struct{ aliases map[string]string }

func (h *handlerFlag) String() string {
	pairs := make([]string, 0, len(h.aliases))
	for name, rt := range h.aliases {
		pairs = append(pairs, name+"="+rt)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func (h *handlerFlag) Set(value string) error {
	for _, one := range strings.Split(value, ",") {
		name, rt, err := ParseRuntimeHandler(one)
		if err != nil {
			return err
		}
		h.aliases[name] = rt
	}
	return nil
}

// merge adds the aliases of values whose names are not set yet.
func (h *handlerFlag) merge(values []string) error {
	for _, v := range values {
		name, rt, err := ParseRuntimeHandler(v)
		if err != nil {
			return err
		}
		if _, set := h.aliases[name]; !set {
			h.aliases[name] = rt
		}
	}
	return nil
}

func (h *handlerFlag) Type() string { return "NAME=DOCKER_RUNTIME" }

// BindFlags registers every setting on fs, writing into c.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ContainerRuntimeEndpoint, "container-runtime-endpoint", c.ContainerRuntimeEndpoint, "the CRI endpoint to serve on: unix://PATH (the socket systemd passed for PATH, if it did, else our own), or fd:// for the socket systemd passes (cri-docker.socket); tcp:// is refused, as upstream does on Linux")
	fs.StringVar(&c.DockerEndpoint, "docker-endpoint", c.DockerEndpoint, "the Docker daemon to use")
	fs.StringVar(&c.RootDirectory, "cri-dockerd-root-directory", c.RootDirectory, "where cri-dockerd keeps its state (checkpoints)")
	fs.StringVar(&c.CheckpointDirectory, "checkpoint-directory", c.CheckpointDirectory, "the only directory CheckpointContainer writes archives into: the kubelet's root directory + /checkpoints")
	fs.StringVar(&c.PodInfraContainerImage, "pod-infra-container-image", c.PodInfraContainerImage, "the image of each pod's sandbox (pause) container")
	fs.DurationVar(&c.RuntimeRequestTimeout, "runtime-request-timeout", c.RuntimeRequestTimeout, "timeout of each Docker call, except image pulls")
	fs.DurationVar(&c.ImagePullProgressDeadline, "image-pull-progress-deadline", c.ImagePullProgressDeadline, "cancel an image pull that reports no progress for this long while downloading, as upstream; once a layer is extracting the deadline no longer applies (a big layer takes long to extract). Progress is logged every 10 s")
	fs.IntVar(&c.MaxConcurrentStarts, "max-concurrent-starts", c.MaxConcurrentStarts, "container starts asked of Docker at once (0: four times the node's CPUs; -1: no bound). The others wait, a pod's containers before other pods' sandboxes and each in arrival order, at most 1 minute: of 100 pods created at once, the first are Running first, instead of all near the end")
	fs.StringVar(&c.NetworkPlugin, "network-plugin", c.NetworkPlugin, `pod networking: "cni" (CNI plugins), or "" / "none" (Docker's default bridge with Docker port bindings)`)
	fs.StringSliceVar(&c.CNIBinDirs, "cni-bin-dir", c.CNIBinDirs, "directories searched in order for CNI plugin binaries, comma-separated or repeated (used with --network-plugin=cni)")
	fs.StringVar(&c.CNIConfDir, "cni-conf-dir", c.CNIConfDir, "directory with CNI network configs; the first valid one in lexical order is used, and changes are picked up without a restart (used with --network-plugin=cni)")
	fs.StringVar(&c.CNICacheDir, "cni-cache-dir", c.CNICacheDir, "CNI cache directory (used with --network-plugin=cni)")
	fs.IntVar(&c.NetworkPluginMTU, "network-plugin-mtu", c.NetworkPluginMTU, "MTU of the pods' interface, set in the config of CNI plugins that take one (bridge, ptp, macvlan, ipvlan, vlan); 0 keeps the config's")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: trace, debug, info, warn, error")
	fs.Var(&handlerFlag{aliases: c.RuntimeHandlerAliases}, "runtime-handler",
		"map a RuntimeClass handler to a Docker runtime, NAME=DOCKER_RUNTIME (repeatable), e.g. spin=io.containerd.spin.v2")
	fs.StringVar(&c.DefaultRuntimeHandler, "default-runtime-handler-name", c.DefaultRuntimeHandler, `the handler name that, like "", selects Docker's default runtime`)
	fs.StringSliceVar(&c.PrivilegedWithoutHostDevices, "privileged-without-host-devices", c.PrivilegedWithoutHostDevices,
		"runtime handlers (comma-separated or repeated) whose privileged containers get every privilege except the node's devices, as containerd's privileged_without_host_devices; for VM runtimes such as Kata")
	fs.StringVar(&c.MetricsBindAddr, "metrics-bind-addr", c.MetricsBindAddr, "serve Prometheus metrics on HOST:PORT, over plain HTTP without authentication (off when empty; use a loopback host unless you mean every interface: any other is warned about at start)")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "also serve Go's profiles on /debug/pprof/ of the --metrics-bind-addr listener, which it needs (without this flag /debug/pprof is not found: 404). pprof has no authentication: keep it on a loopback address")
	fs.StringVar(&c.PodCIDR, "pod-cidr", c.PodCIDR, "the pod CIDR (IPv4, IPv6, or both comma-separated) given to CNI plugins as ipRanges until the kubelet sends one (UpdateRuntimeConfig), which then wins")
	fs.BoolVar(&c.IPv6DualStack, "ipv6-dual-stack", c.IPv6DualStack, "accepted for upstream compatibility: a pod gets every IP (IPv4 and IPv6) its CNI result holds, with or without this flag")
	fs.StringVar(&c.HairpinMode, "hairpin-mode", c.HairpinMode, `hairpin mode, as upstream: "hairpin-veth", "promiscuous-bridge" or "none". With CNI, the bridge plugin's own "hairpinMode" setting decides; with Docker's bridge (--network-plugin="") hairpin-veth and promiscuous-bridge turn hairpin on for each pod's veth`)
	fs.StringVar(&c.RuntimeCgroups, "runtime-cgroups", c.RuntimeCgroups, "absolute name of a cgroup to keep Docker's daemons (dockerd, containerd) in, created if missing and checked every 5 minutes, as upstream")
	fs.StringVar(&c.DockerLogMaxSize, "docker-log-max-size", c.DockerLogMaxSize,
		`max-size of Docker's own json-file log of each container (Docker keeps it beside the CRI log file the kubelet rotates; without a bound it grows as long as the container runs). Set only when Docker's log driver is json-file and daemon.json sets no max-size; any other driver is left alone. "0" or "" leaves Docker's log settings alone`)
	fs.IntVar(&c.DockerLogMaxFile, "docker-log-max-file", c.DockerLogMaxFile,
		"max-file that goes with --docker-log-max-size: how many files of that size Docker keeps. cri-dockerd copies from them, so a longer outage of cri-dockerd under a chatty container loses what Docker dropped meanwhile")
	fs.IntVar(&c.MaxContainerLogLineSize, "max-container-log-line-size", c.MaxContainerLogLineSize,
		"the longest text of one line of a container's CRI log file, in bytes, as containerd's max_container_log_line_size: a longer line (a terminal's output without newlines) is written as partial lines, so a container cannot fill cri-dockerd's memory with one line. 1 to 16 MiB")
	fs.BoolVar(&c.NRI, "nri", c.NRI, "host NRI, the Node Resource Interface, as containerd and CRI-O do: plugins on --nri-socket and in --nri-plugin-path see every pod and container and adjust containers as they are created (docs/nri.md). When another runtime serves the socket, NRI is off, with a warning")
	fs.StringVar(&c.NRISocket, "nri-socket", c.NRISocket, "where external NRI plugins connect (containerd's socket_path)")
	fs.StringVar(&c.NRIPluginPath, "nri-plugin-path", c.NRIPluginPath, "a directory of NRI plugins to start, named IDX-NAME (containerd's plugin_path)")
	fs.StringVar(&c.NRIPluginConfigPath, "nri-plugin-config-path", c.NRIPluginConfigPath, "the configuration of the plugins of --nri-plugin-path (containerd's plugin_config_path)")
	fs.DurationVar(&c.NRIPluginRegistrationTimeout, "nri-plugin-registration-timeout", c.NRIPluginRegistrationTimeout, "how long an NRI plugin may take to register (containerd's plugin_registration_timeout)")
	fs.DurationVar(&c.NRIPluginRequestTimeout, "nri-plugin-request-timeout", c.NRIPluginRequestTimeout, "how long an NRI plugin may take to answer an event (containerd's plugin_request_timeout)")
	fs.BoolVar(&c.NRIDisableConnections, "nri-disable-connections", c.NRIDisableConnections, "accept no external NRI plugin on --nri-socket: only those of --nri-plugin-path run (containerd's disable_connections)")
	fs.StringVar(&c.StreamingBindAddr, "streaming-bind-addr", c.StreamingBindAddr,
		"where the exec/attach/port-forward server listens: HOST:PORT, HOST (a free port) or :PORT (every interface); port 0 picks a free port")
}

// LoadFile applies a YAML config file whose keys are the flag names, e.g.
//
//	docker-endpoint: unix:///var/run/docker.sock
//	runtime-handler: [spin=io.containerd.spin.v2, kata=kata-runtime]
//
// Flags given on the command line win over the file; runtime handler aliases from both are
// merged, the command line winning for a name set in both.
func LoadFile(path string, fs *pflag.FlagSet) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var settings map[string]any
	if err := yaml.Unmarshal(data, &settings); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		flag := fs.Lookup(key)
		if flag == nil || key == "config" {
			return fmt.Errorf("config file %s: unknown setting %q", path, key)
		}
		values, err := settingValues(settings[key])
		if err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, key, err)
		}
		if hf, ok := flag.Value.(*handlerFlag); ok {
			// Aliases merge: the file adds handlers, the command line wins per name.
			if err := hf.merge(values); err != nil {
				return fmt.Errorf("config file %s: %s: %w", path, key, err)
			}
			continue
		}
		if flag.Changed {
			continue
		}
		if sv, ok := flag.Value.(pflag.SliceValue); ok {
			if err := sv.Replace(values); err != nil {
				return fmt.Errorf("config file %s: %s: %w", path, key, err)
			}
			continue
		}
		for _, v := range values {
			if err := flag.Value.Set(v); err != nil {
				return fmt.Errorf("config file %s: %s: %w", path, key, err)
			}
		}
	}
	return nil
}

func settingValues(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return []string{""}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, item := range v {
			switch item.(type) {
			case []any, map[string]any:
				return nil, fmt.Errorf("nested values are not supported")
			}
			out = append(out, fmt.Sprint(item))
		}
		return out, nil
	case map[string]any:
		// runtime-handler may be written as a map: {spin: io.containerd.spin.v2}
		out := make([]string, 0, len(v))
		for k, item := range v {
			out = append(out, fmt.Sprintf("%s=%v", k, item))
		}
		sort.Strings(out)
		return out, nil
	default:
		return []string{fmt.Sprint(v)}, nil
	}
}
