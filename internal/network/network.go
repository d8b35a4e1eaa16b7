// Package network networks pod sandboxes: Docker's default bridge (--network-plugin "" or
// "none") or CNI through github.com/containernetworking/cni's libcni (--network-plugin=cni).
//
// The package never talks to Docker. core creates the sandbox container as the plugin asks
// (Namespaced: an empty namespace, Docker NetworkMode none) and hands the plugin the path of
// the sandbox's network namespace. What a plugin needs to tear a pod's network down again is an
// Attachment, which core keeps in the sandbox's checkpoint file, so that teardown works after a
// restart of cri-dockerd and after the sandbox container is gone.
package network

import (
	"context"
	"errors"
)

// Plugin networks pod sandboxes. Implementations are safe for concurrent use.
type Plugin interface {
	// Name is the --network-plugin value this plugin serves ("" for Docker's bridge).
	Name() string
	// Namespaced reports whether a sandbox gets an empty network namespace of its own (Docker
	// NetworkMode none) that SetUp attaches. When false, Docker's default bridge networks the
	// sandbox, with port mappings published by Docker, and Plan, SetUp and TearDown do nothing.
	Namespaced() bool
	// Status is nil when pods can be networked, else an error that tells a node admin why not.
	Status() error
	// Plan checks that pod can be networked now and says how (network, interface, capability
	// arguments), without any side effect. A plugin that is not ready answers a *NotReadyError.
	Plan(pod Pod) (*Attachment, error)
	// SetUp attaches the network namespace at netns (e.g. /proc/PID/ns/net) and records the
	// pod's IPs in att. When it fails, what the plugin did halfway has been undone (a CNI DEL
	// followed the failed ADD), unless the error says that the undoing failed too.
	SetUp(ctx context.Context, att *Attachment, netns string) error
	// TearDown detaches the pod. netns is "" when the sandbox no longer runs. Tearing down
	// twice, or a pod whose network was never set up completely, is not an error.
	TearDown(ctx context.Context, att *Attachment, netns string) error
	// UpdatePodCIDR records the node's pod CIDR(s), comma-separated as the kubelet sends them,
	// for plugins that allocate from it (the CNI ipRanges capability); "" clears it.
	UpdatePodCIDR(cidr string) error
	// Close stops background work (the CNI config directory watch).
	Close() error
}

// Pod is what a plugin needs to know about a pod to network it.
type Pod struct {
	SandboxID string
	Namespace string
	Name      string
	UID       string
	// PortMappings with a host port; the others need nothing from the network.
	PortMappings []PortMapping
	Bandwidth    *Bandwidth
	DNS          *DNS
}

// PortMapping publishes a pod port on the node.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // tcp, udp or sctp
	HostIP        string `json:"hostIP,omitempty"`
}

// DNS is the pod's resolver configuration.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Attachment says how a pod is attached to its network: what SetUp did, and what TearDown needs
// to undo it. It is stored as JSON in the sandbox's checkpoint.
type Attachment struct {
	// Plugin is the name of the plugin that made it ("cni").
	Plugin    string `json:"plugin"`
	SandboxID string `json:"sandboxId"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Network is the CNI network's name, ConfFile the file it was read from.
	Network  string `json:"network"`
	ConfFile string `json:"confFile,omitempty"`
	// IfName is the pod's interface in its namespace.
	IfName string `json:"ifName"`
	// IPs are the pod's addresses, IPv4 first; empty until SetUp succeeded.
	IPs []string `json:"ips,omitempty"`
	// Capability arguments passed to the plugins at ADD, passed again at DEL.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	Bandwidth    *Bandwidth    `json:"bandwidth,omitempty"`
	DNS          *DNS          `json:"dns,omitempty"`
	PodCIDRs     []string      `json:"podCIDRs,omitempty"`

	// plan is the plugin's private state between Plan and SetUp (the loaded network config).
	plan any
}

// NotReadyError says why a plugin cannot network pods yet.
type NotReadyError struct {
	Plugin string
	Reason string
}

func (e *NotReadyError) Error() string {
	return "network plugin " + e.Plugin + " is not ready: " + e.Reason
}

// IsNotReady reports whether err says that the plugin is not ready.
func IsNotReady(err error) bool {
	var nr *NotReadyError
	return errors.As(err, &nr)
}

// DockerBridge is the plugin for --network-plugin "" and "none": Docker's default bridge
// networks each sandbox, and Docker publishes its port mappings.
type DockerBridge struct{ name string }

// NewDockerBridge returns the Docker bridge plugin under the --network-plugin name given.
func NewDockerBridge(name string) *DockerBridge { return &DockerBridge{name: name} }

// Name implements Plugin.
func (b *DockerBridge) Name() string { return b.name }

// Namespaced implements Plugin: Docker makes and attaches the namespace.
func (b *DockerBridge) Namespaced() bool { return false }

// Status implements Plugin: Docker's bridge needs nothing more than Docker.
func (b *DockerBridge) Status() error { return nil }

// Plan implements Plugin.
func (b *DockerBridge) Plan(Pod) (*Attachment, error) { return nil, nil }

// SetUp implements Plugin.
func (b *DockerBridge) SetUp(context.Context, *Attachment, string) error { return nil }

// TearDown implements Plugin.
func (b *DockerBridge) TearDown(context.Context, *Attachment, string) error { return nil }

// UpdatePodCIDR implements Plugin: Docker's bridge allocates from its own subnet.
func (b *DockerBridge) UpdatePodCIDR(string) error { return nil }

// Close implements Plugin.
func (b *DockerBridge) Close() error { return nil }
