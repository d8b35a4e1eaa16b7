package config

import (
	"github.com/cri-dockerd/cri-dockerd/internal/network/podcidr"
	"strings"
	"testing"
)

// The command lines deployment tools give upstream cri-dockerd v0.4.3 must parse unchanged.
func TestUpstreamCommandLinesParse(t *testing.T) {
	for name, args := range map[string][]string{
		"minikube": {"--container-runtime-endpoint", "fd://", "--pod-infra-container-image=registry.k8s.io/pause:3.10", "--network-plugin=cni", "--hairpin-mode=hairpin-veth"},
		"kubespray": {"--container-runtime-endpoint", "unix:///var/run/cri-dockerd.sock", "--cni-conf-dir=/etc/cni/net.d", "--cni-bin-dir=/opt/cni/bin",
			"--network-plugin=cni", "--pod-cidr=10.233.64.0/18", "--pod-infra-container-image=registry.k8s.io/pause:3.10", "--log-level", "info", "--ipv6-dual-stack=True"},
		"k3s": {"--runtime-cgroups=/system.slice/docker.service", "--ipv6-dual-stack=true"},
	} {
		cfg, err := parse(t, args, "")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		switch name {
		case "minikube":
			if cfg.HairpinMode != HairpinVeth || cfg.ContainerRuntimeEndpoint != "fd://" {
				t.Errorf("minikube: %+v", cfg)
			}
		case "kubespray":
			if cfg.PodCIDR != "10.233.64.0/18" || !cfg.IPv6DualStack || cfg.CNIBinDirs[0] != "/opt/cni/bin" || len(cfg.CNIBinDirs) != 1 {
				t.Errorf("kubespray: %+v", cfg)
			}
		case "k3s":
			if cfg.RuntimeCgroups != "/system.slice/docker.service" || !cfg.IPv6DualStack {
				t.Errorf("k3s: %+v", cfg)
			}
		}
	}
}

func TestFlagValuesAreCheckedWithTheFlagNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod-cidr=10.233.64.0/33"}, `--pod-cidr "10.233.64.0/33": "10.233.64.0/33" is not a CIDR`},
		{[]string{"--pod-cidr=banana"}, `--pod-cidr "banana"`},
		{[]string{"--pod-cidr=10.0.0.0/16,fd00::/64,10.1.0.0/16"}, "at most two CIDRs"},
		{[]string{"--hairpin-mode=hairpin"}, `--hairpin-mode "hairpin": want one of "hairpin-veth", "promiscuous-bridge", "none"`},
		{[]string{"--runtime-cgroups=system.slice/docker.service"}, `--runtime-cgroups "system.slice/docker.service": want an absolute cgroup name`},
		{[]string{"--runtime-cgroups=/a/../b"}, "--runtime-cgroups"},
		{[]string{"--container-runtime-endpoint=tcp://0.0.0.0:3735"}, "tcp endpoints are not served on Linux"},
		{[]string{"--container-runtime-endpoint=npipe:////./pipe/cri-dockerd"}, `scheme "npipe" is not supported on Linux`},
		{[]string{"--container-runtime-endpoint=unix://"}, "empty socket path"},
		{[]string{"--container-runtime-endpoint=unix://relative.sock"}, "must be absolute"},
		{[]string{"--container-runtime-endpoint=cri.sock"}, "want unix:///PATH"},
	} {
		_, err := parse(t, tc.args, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	// pflag's own type errors name the flag too (these reach stderr from main).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ipv6-dual-stack=maybe"}, `invalid argument "maybe" for "--ipv6-dual-stack"`},
		{[]string{"--network-plugin-mtu=big"}, `invalid argument "big" for "--network-plugin-mtu"`},
		{[]string{"--image-pull-progress-deadline=5"}, `invalid argument "5" for "--image-pull-progress-deadline"`},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		_, err := parse(t, tc.args, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Endpoint
	}{
		{"unix:///var/run/cri-dockerd.sock", Endpoint{Path: "/var/run/cri-dockerd.sock"}},
		{"/run/cri-dockerd.sock", Endpoint{Path: "/run/cri-dockerd.sock", Bare: true}},
		{"fd://", Endpoint{Activated: true}},
		{"fd://cri-docker.socket", Endpoint{Activated: true, FDName: "cri-docker.socket"}},
	} {
		got, err := ParseEndpoint(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestPodCIDRsDualStack(t *testing.T) {
	got, err := podcidr.Parse("10.244.0.0/16, fd00:10:244::/56")
	if err != nil || len(got) != 2 || got[1] != "fd00:10:244::/56" {
		t.Errorf("podcidr.Parse = %v, %v", got, err)
	}
}
