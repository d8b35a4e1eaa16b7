package network

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"
)

// confExtensions are the file names libcni-based runtimes read from the config directory.
var confExtensions = []string{".conf", ".conflist", ".json"}

// mtuPluginTypes are the reference plugins that take an "mtu" setting for the pod's interface;
// --network-plugin-mtu overrides it in their configs.
var mtuPluginTypes = map[string]bool{"bridge": true, "ptp": true, "macvlan": true, "ipvlan": true, "vlan": true}

// loadedNetwork is the CNI network pods are attached to: the first valid config file in
// lexical order, as kubelet-era runtimes (dockershim, containerd, CRI-O) choose it.
type loadedNetwork struct {
	file string
	raw  []byte // the file's content, to notice a change
	list *libcni.NetworkConfigList
}

// loadNetwork reads dir and returns the network to use, or why there is none. Files that
// cannot be parsed are skipped; the reason names each of them, so a node admin sees why a
// config that is there is not used.
func loadNetwork(dir string, mtu int) (*loadedNetwork, string) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, fmt.Sprintf("cannot read the CNI config directory %s: %v", dir, err)
	}
	sort.Strings(files)
	var skipped []string
	for _, file := range files {
		n, err := readNetwork(file, mtu)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", filepath.Base(file), err))
			continue
		}
		return n, ""
	}
	if len(skipped) > 0 {
		return nil, fmt.Sprintf("no valid CNI network config in %s (%s)", dir, strings.Join(skipped, "; "))
	}
	return nil, fmt.Sprintf("no CNI network config in %s", dir)
}

// readNetwork reads one config file: a network list (.conflist) or a single plugin's config
// (.conf, .json), which becomes a list of one.
func readNetwork(file string, mtu int) (*loadedNetwork, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var list *libcni.NetworkConfigList
	if strings.HasSuffix(file, ".conflist") {
		list, err = libcni.NetworkConfFromFile(file)
	} else {
		list, err = confListFromPluginConf(raw)
	}
	if err != nil {
		return nil, err
	}
	if err := utils.ValidateNetworkName(list.Name); err != nil {
		return nil, fmt.Errorf("network name %q: %v", list.Name, err)
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("network %q has no plugins", list.Name)
	}
	if mtu > 0 {
		for i, p := range list.Plugins {
			if !mtuPluginTypes[p.Network.Type] {
				continue
			}
			if list.Plugins[i], err = libcni.InjectConf(p, map[string]any{"mtu": mtu}); err != nil {
				return nil, fmt.Errorf("set the mtu of plugin %q: %v", p.Network.Type, err)
			}
		}
	}
	return &loadedNetwork{file: file, raw: raw, list: list}, nil
}

// confListFromPluginConf wraps a single plugin's config into a list, as libcni's deprecated
// ConfListFromConf does.
func confListFromPluginConf(raw []byte) (*libcni.NetworkConfigList, error) {
	plugin, err := libcni.NetworkPluginConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
	var rawPlugin map[string]any
	if err := json.Unmarshal(raw, &rawPlugin); err != nil {
		return nil, err
	}
	b, err := json.Marshal(map[string]any{
		"name":       plugin.Network.Name,
		"cniVersion": plugin.Network.CNIVersion,
		"plugins":    []any{rawPlugin},
	})
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(b)
}

// same reports whether two loads found the same network in the same file.
func (n *loadedNetwork) same(o *loadedNetwork) bool {
	if n == nil || o == nil {
		return n == o
	}
	return n.file == o.file && bytes.Equal(n.raw, o.raw)
}
