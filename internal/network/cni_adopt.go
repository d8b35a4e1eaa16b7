package network

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// Taking over pods that upstream cri-dockerd (Mirantis, dockershim's heir) attached with its CNI
// plugin. Upstream ran, through libcni and with the same cache directory (--cni-cache-dir), two
// ADDs per pod: its network's config on eth0, and a loopback network of its own
// ("cni-loopback", cniVersion 0.2.0) on lo. libcni cached both (config, CNI_ARGS, capability
// arguments and result) under <cache>/results/<network>-<container ID>-<ifname>; that is what
// a DEL needs, whatever the config directory holds today.

// upstreamLoopbackNetwork is the name of the loopback network upstream cri-dockerd attached
// every pod's lo with.
const upstreamLoopbackNetwork = "cni-loopback"

// Adopter is implemented by plugins that can take over pods another runtime attached.
type Adopter interface {
	// Adopt builds the attachment of pod (SandboxID, Namespace, Name, UID, PortMappings; the
	// port mappings may be empty when unknown, and so may the name, which the cached CNI_ARGS
	// give then) from what the plugin's cache holds of it; ips are the pod's addresses as read
	// from its namespace (nil when it does not run: the cached result of the ADD is used then).
	// The attachment is good for a DEL even when the cache knows nothing of the pod; the
	// warnings then say what the DEL will lack. Without ips, nil means the cache holds nothing.
	Adopt(pod Pod, ips []string) (att *Attachment, warnings []string)
	// ReleaseLeftovers runs the DEL of what else the other runtime attached sandboxID with
	// (upstream's loopback network), from the cache, and so drops those cache entries. netns is
	// "" when the sandbox does not run.
	ReleaseLeftovers(ctx context.Context, sandboxID, netns string) error
}

var _ Adopter = (*CNI)(nil)

// CachedConfFile is the ConfFile of an attachment whose network config is libcni's cached one.
const CachedConfFile = "cni-cache"

// Adopt implements Adopter.
func (c *CNI) Adopt(pod Pod, ips []string) (*Attachment, []string) {
	att := &Attachment{
		Plugin: CNIPluginName, SandboxID: pod.SandboxID, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		IfName: podIfName, IPs: ips, PortMappings: hostPortMappings(pod.PortMappings),
	}
	var warnings []string
	current := ""
	if n, err := c.network(); err == nil {
		current = n.list.Name
	}
	cached, err := c.cni.GetCachedAttachments(pod.SandboxID)
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("read the CNI cache (%s): %v", c.opts.CacheDir, err))
	}
	var found *libcni.NetworkAttachment
	for _, a := range cached {
		if a.IfName != podIfName || a.Network == upstreamLoopbackNetwork {
			continue
		}
		if found == nil || a.Network == current {
			found = a
		}
	}
	if found == nil {
		att.Network = current
		if len(att.IPs) == 0 {
			return nil, append(warnings, fmt.Sprintf("the CNI cache (%s) holds nothing of this sandbox and it has no IP: there is nothing to adopt", c.opts.CacheDir))
		}
		what := "no DEL can run"
		if current != "" {
			what = fmt.Sprintf("its DEL will use the current config of network %q, best effort", current)
		}
		return att, append(warnings, fmt.Sprintf("the CNI cache (%s) holds no config of this sandbox's ADD: %s", c.opts.CacheDir, what))
	}
	att.Network = found.Network
	att.ConfFile = CachedConfFile
	if att.Namespace == "" && att.Name == "" {
		// Docker no longer has the sandbox: the pod's name is in the ADD's CNI_ARGS.
		att.Namespace, att.Name, att.UID = podFromCNIArgs(found.CniArgs)
	}
	if list, err := libcni.NetworkConfFromBytes(found.Config); err != nil {
		warnings = append(warnings, fmt.Sprintf("the cached config of network %q cannot be read (%v): the DEL falls back to the current config", found.Network, err))
	} else if len(att.IPs) == 0 {
		att.IPs = c.cachedIPs(list, found)
	}
	caps := capabilityArgs(found.CapabilityArgs)
	if len(att.PortMappings) == 0 && len(caps.PortMappings) > 0 {
		// Upstream's checkpoint is gone: the mappings the ADD had are in the cache too.
		att.PortMappings = hostPortMappings(caps.PortMappings)
	}
	att.Bandwidth = caps.Bandwidth
	for _, r := range caps.IPRanges {
		for _, one := range r {
			if one.Subnet != "" {
				att.PodCIDRs = append(att.PodCIDRs, one.Subnet)
			}
		}
	}
	return att, warnings
}

// podFromCNIArgs reads the pod's namespace, name and uid from the CNI_ARGS of an ADD.
func podFromCNIArgs(args [][2]string) (namespace, name, uid string) {
	for _, kv := range args {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			namespace = kv[1]
		case "K8S_POD_NAME":
			name = kv[1]
		case "K8S_POD_UID":
			uid = kv[1]
		}
	}
	return namespace, name, uid
}

// cachedIPs are the pod's addresses in the cached result of its ADD.
func (c *CNI) cachedIPs(list *libcni.NetworkConfigList, a *libcni.NetworkAttachment) []string {
	res, err := c.cni.GetNetworkListCachedResult(list, &libcni.RuntimeConf{ContainerID: a.ContainerID, IfName: a.IfName})
	if err != nil || res == nil {
		return nil
	}
	ips, _ := podIPs(res)
	return ips
}

// cachedCapabilities are the capability arguments libcni cached at ADD that a DEL passes again.
type cachedCapabilities struct {
	PortMappings []PortMapping   `json:"portMappings"`
	Bandwidth    *Bandwidth      `json:"bandwidth"`
	IPRanges     [][]cachedRange `json:"ipRanges"`
}

type cachedRange struct {
	Subnet string `json:"subnet"`
}

func capabilityArgs(raw map[string]any) cachedCapabilities {
	var out cachedCapabilities
	if len(raw) == 0 {
		return out
	}
	b, err := json.Marshal(raw)
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	if out.Bandwidth != nil && *out.Bandwidth == (Bandwidth{}) {
		out.Bandwidth = nil
	}
	return out
}

// hostPortMappings keeps the mappings that publish a host port, protocols in lower case.
func hostPortMappings(in []PortMapping) []PortMapping {
	var out []PortMapping
	for _, pm := range in {
		if pm.HostPort <= 0 {
			continue
		}
		pm.Protocol = strings.ToLower(pm.Protocol)
		if pm.Protocol == "" {
			pm.Protocol = "tcp"
		}
		out = append(out, pm)
	}
	return out
}

// ReleaseLeftovers implements Adopter.
func (c *CNI) ReleaseLeftovers(ctx context.Context, sandboxID, netns string) error {
	cached, err := c.cni.GetCachedAttachments(sandboxID)
	if err != nil {
		return fmt.Errorf("read the CNI cache (%s): %w", c.opts.CacheDir, err)
	}
	var errs []string
	for _, a := range cached {
		if a.Network != upstreamLoopbackNetwork {
			continue
		}
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			errs = append(errs, fmt.Sprintf("network %q: cached config: %v", a.Network, err))
			continue
		}
		rt := &libcni.RuntimeConf{ContainerID: sandboxID, NetNS: netns, IfName: a.IfName, Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
		if err := c.cni.DelNetworkList(ctx, list, rt); err != nil {
			errs = append(errs, fmt.Sprintf("network %q: %v", a.Network, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("CNI DEL of upstream's leftovers: %s", strings.Join(errs, "; "))
	}
	return nil
}

// globalIPs keeps the global unicast addresses (no loopback, link-local or multicast), IPv4
// first.
func globalIPs(addrs []net.Addr) []string {
	var v4, v6 []string
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if ip == nil || !ip.IsGlobalUnicast() {
			continue
		}
		if v := ip.To4(); v != nil {
			v4 = append(v4, v.String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	return append(v4, v6...)
}
