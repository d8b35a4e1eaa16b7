package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/cri-dockerd/cri-dockerd/internal/network/podcidr"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
)

// CNIPluginName is the --network-plugin value of the CNI plugin.
const CNIPluginName = "cni"

// podIfName is the pod's interface, as every Kubernetes runtime names it.
const podIfName = "eth0"

// defaultResync is how often the config directory is read again without a change notice, and
// how often it is polled when it cannot be watched.
const defaultResync = 5 * time.Second

// CNIOptions configure the CNI plugin.
type CNIOptions struct {
	// ConfDir holds the network configs (--cni-conf-dir); it is created when missing, so that
	// it can be watched.
	ConfDir string
	// BinDirs are searched for plugin binaries, in order (--cni-bin-dir).
	BinDirs []string
	// CacheDir is libcni's cache of ADD results and configs (--cni-cache-dir).
	CacheDir string
	// MTU, when positive, overrides the mtu of the pod interface in the configs of plugins that
	// take one (bridge, ptp, macvlan, ipvlan, vlan) (--network-plugin-mtu).
	MTU int
	// CNI runs the plugins; nil: libcni with BinDirs and CacheDir. Tests pass a fake.
	CNI libcni.CNI
	// Resync is how often the config directory is read again without a change notice (and
	// polled when inotify is not available); default 5 s.
	Resync time.Duration
	Logger *logrus.Entry
}

// CNI networks pods through CNI plugins, with libcni. The network is the first valid config in
// ConfDir; the directory is watched, so a config that appears (or changes) is used without a
// restart.
type CNI struct {
	opts CNIOptions
	cni  libcni.CNI
	log  *logrus.Entry

	// loadMu makes each load's read of the directory and store of its result one step: two
	// loads at once (the watch's and a caller's) could otherwise store an older read last.
	loadMu sync.Mutex

	mu       sync.RWMutex
	current  *loadedNetwork
	why      string // why current is nil
	podCIDRs []string

	stop chan struct{}
	done chan struct{}
}

// NewCNI loads the current network config and starts watching the config directory.
func NewCNI(opts CNIOptions) (*CNI, error) {
	if opts.ConfDir == "" {
		return nil, errors.New("cni: the config directory is not set")
	}
	if len(opts.BinDirs) == 0 {
		return nil, errors.New("cni: no plugin directory is set")
	}
	if opts.Resync <= 0 {
		opts.Resync = defaultResync
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	c := &CNI{opts: opts, cni: opts.CNI, log: opts.Logger.WithField("network_plugin", CNIPluginName), stop: make(chan struct{}), done: make(chan struct{})}
	if c.cni == nil {
		c.cni = libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, nil)
	}
	// The watch needs the directory; a fresh node may not have it yet.
	if err := os.MkdirAll(opts.ConfDir, 0o755); err != nil {
		c.log.Warnf("cannot create the CNI config directory %s (%v); polling for it", opts.ConfDir, err)
	}
	c.reload()
	go c.watch()
	return c, nil
}

// Name implements Plugin.
func (c *CNI) Name() string { return CNIPluginName }

// Namespaced implements Plugin: sandboxes get an empty namespace that CNI attaches.
func (c *CNI) Namespaced() bool { return true }

// Close implements Plugin: it stops the watch of the config directory.
func (c *CNI) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

// beforeFirstWatch runs in watch before the directory's watch is added: tests change the
// directory there, after New's first read and before the watch, which only the reload after
// the watch's Add sees.
var beforeFirstWatch = func() {}

// watch reloads the network when the config directory changes, and every Resync anyway (which
// also covers a directory that could not be watched, or was removed and made again).
func (c *CNI) watch() {
	defer close(c.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		c.log.Warnf("cannot watch %s (%v); reading it every %s", c.opts.ConfDir, err, c.opts.Resync)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	watching := false
	addWatch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(c.opts.ConfDir); err == nil {
			watching = true
			c.reload() // whatever changed before the watch took hold
		}
	}
	beforeFirstWatch()
	addWatch()
	ticker := time.NewTicker(c.opts.Resync)
	defer ticker.Stop()
	for {
		select {
		case <-c.stop:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Name == c.opts.ConfDir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				watching = false // the kernel dropped the watch with the directory
			}
			c.reload()
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			c.log.Warnf("watching %s: %v", c.opts.ConfDir, err)
		case <-ticker.C:
			addWatch()
			c.reload()
		}
	}
}

// reload reads the config directory and switches to the network it names. A panic in reading
// a config leaves the current network as it is.
func (c *CNI) reload() {
	_ = supervise.Run(c.log, "reload of the CNI config", c.load)
}

func (c *CNI) load() {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	n, why := loadNetwork(c.opts.ConfDir, c.opts.MTU)
	changed := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock() // also on a panic: the network stays readable
		changed := !n.same(c.current) || (n == nil && why != c.why)
		c.current, c.why = n, why
		return changed
	}()
	switch {
	case !changed:
	case n == nil:
		c.log.Warn(why)
	default:
		c.log.WithFields(logrus.Fields{"network": n.list.Name, "file": n.file, "cni_version": n.list.CNIVersion}).Info("CNI network config loaded")
	}
}

// network returns the current network, or a *NotReadyError when there is none or one of its
// plugin binaries is missing.
func (c *CNI) network() (*loadedNetwork, error) {
	c.mu.RLock()
	n, why := c.current, c.why
	c.mu.RUnlock()
	if n == nil {
		return nil, &NotReadyError{Plugin: CNIPluginName, Reason: why}
	}
	for _, p := range n.list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, c.opts.BinDirs); err != nil {
			return nil, &NotReadyError{Plugin: CNIPluginName, Reason: fmt.Sprintf("network %q (%s): %v", n.list.Name, n.file, err)}
		}
	}
	return n, nil
}

// Status implements Plugin: ready once a valid config exists and its plugins are installed.
func (c *CNI) Status() error {
	_, err := c.network()
	return err
}

// UpdatePodCIDR implements Plugin.
func (c *CNI) UpdatePodCIDR(cidr string) error {
	cidrs, err := podcidr.Parse(cidr)
	if err != nil {
		return fmt.Errorf("pod CIDR: %w", err)
	}
	c.mu.Lock()
	c.podCIDRs = cidrs
	c.mu.Unlock()
	return nil
}

// Plan implements Plugin.
func (c *CNI) Plan(pod Pod) (*Attachment, error) {
	n, err := c.network()
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	cidrs := slices.Clone(c.podCIDRs)
	c.mu.RUnlock()
	att := &Attachment{
		Plugin: CNIPluginName, SandboxID: pod.SandboxID, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		Network: n.list.Name, ConfFile: n.file, IfName: podIfName,
		Bandwidth: pod.Bandwidth, DNS: pod.DNS, PodCIDRs: cidrs,
		plan: n,
	}
	for _, pm := range pod.PortMappings {
		if pm.HostPort > 0 {
			att.PortMappings = append(att.PortMappings, pm)
		}
	}
	return att, nil
}

// SetUp implements Plugin: a CNI ADD of the planned network on netns. A failed ADD is not
// undone here: the caller tears down (CNI DEL), as the spec asks of runtimes.
func (c *CNI) SetUp(ctx context.Context, att *Attachment, netns string) error {
	if netns == "" {
		return errors.New("cni: no network namespace to attach")
	}
	list, err := c.listFor(att, nil)
	if err != nil {
		return err
	}
	if list == nil {
		return &NotReadyError{Plugin: CNIPluginName, Reason: fmt.Sprintf("network %q is no longer configured", att.Network)}
	}
	res, err := c.cni.AddNetworkList(ctx, list, c.runtimeConf(att, netns))
	if err != nil {
		return fmt.Errorf("CNI network %q (%s): %w", att.Network, att.ConfFile, err)
	}
	ips, err := podIPs(res)
	if err != nil {
		return fmt.Errorf("CNI network %q: %w", att.Network, err)
	}
	if len(ips) == 0 {
		return fmt.Errorf("CNI network %q gave the pod no IP address", att.Network)
	}
	att.IPs = ips
	return nil
}

// TearDown implements Plugin: a CNI DEL with the config the ADD used (libcni's cache), else the
// network's current config. With no config for the network left at all, nothing can be run: it
// logs that and succeeds, so that the pod can still be removed.
func (c *CNI) TearDown(ctx context.Context, att *Attachment, netns string) error {
	rt := c.runtimeConf(att, netns)
	list, err := c.listFor(att, rt)
	if err != nil {
		return err
	}
	if list == nil {
		c.log.WithField("sandbox", att.SandboxID).Warnf("CNI network %q has no config left (neither in %s nor in the CNI cache): its DEL cannot run", att.Network, c.opts.ConfDir)
		return nil
	}
	if err := c.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("CNI network %q: %w", att.Network, err)
	}
	return nil
}

// listFor finds the config of att's network: the one planned in this process, else (for a
// teardown, rt != nil) the one libcni cached at ADD, else the current one when it is the same
// network. nil when there is none.
func (c *CNI) listFor(att *Attachment, rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, error) {
	if n, ok := att.plan.(*loadedNetwork); ok && n != nil {
		return n.list, nil
	}
	if rt != nil {
		raw, _, err := c.cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: att.Network}, rt)
		if err == nil && len(raw) > 0 {
			if list, err := libcni.NetworkConfFromBytes(raw); err == nil && len(list.Plugins) > 0 {
				return list, nil
			}
		}
	}
	c.mu.RLock()
	n := c.current
	c.mu.RUnlock()
	if n != nil && n.list.Name == att.Network {
		return n.list, nil
	}
	return nil, nil
}

// runtimeConf is the per-pod part of a plugin invocation: CNI_ARGS as the kubelet's runtimes
// pass them and the capability arguments (libcni hands each plugin only those it declares).
func (c *CNI) runtimeConf(att *Attachment, netns string) *libcni.RuntimeConf {
	caps := map[string]any{}
	if len(att.PortMappings) > 0 {
		caps["portMappings"] = att.PortMappings
	}
	if att.Bandwidth != nil {
		caps["bandwidth"] = att.Bandwidth
	}
	if att.DNS != nil {
		caps["dns"] = att.DNS
	}
	if len(att.PodCIDRs) > 0 {
		ranges := make([][]map[string]string, 0, len(att.PodCIDRs))
		for _, cidr := range att.PodCIDRs {
			ranges = append(ranges, []map[string]string{{"subnet": cidr}})
		}
		caps["ipRanges"] = ranges
	}
	return &libcni.RuntimeConf{
		ContainerID: att.SandboxID,
		NetNS:       netns,
		IfName:      att.IfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", att.Namespace},
			{"K8S_POD_NAME", att.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", att.SandboxID},
			{"K8S_POD_UID", att.UID},
		},
		CapabilityArgs: caps,
	}
}

// podIPs are the addresses of a CNI result on interfaces inside the pod (or on no named
// interface), IPv4 first.
func podIPs(res cnitypes.Result) ([]string, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("read the plugin's result: %w", err)
	}
	var v4, v6 []string
	for _, ip := range r.IPs {
		if ip == nil || ip.Address.IP == nil {
			continue
		}
		if i := ip.Interface; i != nil && *i >= 0 && *i < len(r.Interfaces) && r.Interfaces[*i].Sandbox == "" {
			continue // an address of the host's side, e.g. the bridge's gateway
		}
		if v := ip.Address.IP.To4(); v != nil {
			v4 = append(v4, v.String())
		} else {
			v6 = append(v6, ip.Address.IP.String())
		}
	}
	return append(v4, v6...), nil
}
