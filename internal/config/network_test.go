package config

import (
	"strings"
	"testing"
)

func TestNetworkFlags(t *testing.T) {
	cfg, err := parse(t, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NetworkPlugin != "cni" || strings.Join(cfg.CNIBinDirs, ",") != "/opt/cni/bin,/usr/lib/cni" || cfg.CNIConfDir != "/etc/cni/net.d" || cfg.CNICacheDir != "/var/lib/cni/cache" || cfg.NetworkPluginMTU != 0 {
		t.Errorf("defaults: plugin %q, bin %v, conf %q, cache %q, mtu %d", cfg.NetworkPlugin, cfg.CNIBinDirs, cfg.CNIConfDir, cfg.CNICacheDir, cfg.NetworkPluginMTU)
	}
	if Default().CNIBinDirs[0] = "changed"; DefaultCNIBinDirs[0] != "/opt/cni/bin" {
		t.Error("a Config shares its CNI plugin directories with the defaults")
	}

	cfg, err = parse(t, []string{"--network-plugin=cni", "--cni-bin-dir", "/a,/b", "--cni-bin-dir", "/c", "--network-plugin-mtu", "1400"}, "cni-conf-dir: /etc/other\n")
	if err != nil || strings.Join(cfg.CNIBinDirs, ",") != "/a,/b,/c" || cfg.CNIConfDir != "/etc/other" || cfg.NetworkPluginMTU != 1400 {
		t.Errorf("got bin %v conf %q mtu %d, %v", cfg.CNIBinDirs, cfg.CNIConfDir, cfg.NetworkPluginMTU, err)
	}
	for _, plugin := range []string{"", "none"} {
		if cfg, err := parse(t, []string{"--network-plugin=" + plugin}, ""); err != nil || cfg.NetworkPlugin != plugin {
			t.Errorf("--network-plugin=%q: %v", plugin, err)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--network-plugin", "kubenet"}, `use "cni"`},
		{[]string{"--network-plugin-mtu", "-1"}, "--network-plugin-mtu -1"},
		{[]string{"--network-plugin-mtu", "100"}, "below 576"},
		{[]string{"--cni-conf-dir", ""}, "--cni-conf-dir must not be empty"},
		{[]string{"--cni-bin-dir", ""}, "--cni-bin-dir"},
	} {
		if _, err := parse(t, tc.args, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
