// Command nri-plugins is two NRI plugins for the e2e, by the name it is started as (NRI starts
// the plugins of --nri-plugin-path as IDX-NAME): "device-injector" and "ulimit-adjuster", which
// read the annotations of containerd/nri's sample plugins of those names (that module,
// github.com/containerd/nri/plugins, is not on the Go module proxy). Annotations are JSON,
// which the samples' YAML also reads:
//
//	devices.nri.io/container.NAME: [{"path": "/dev/x", "type": "c", "major": 1, "minor": 3}]
//	ulimits.nri.containerd.io/container.NAME: [{"type": "RLIMIT_NOFILE", "hard": 2048, "soft": 1024}]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type device struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

type ulimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type plugin struct{ kind string }

// annotation is the JSON list the pod's annotation KEY/container.NAME holds for ctr, if any.
func annotation(pod *api.PodSandbox, ctr *api.Container, key string, into any) (bool, error) {
	value, ok := pod.GetAnnotations()[key+"/container."+ctr.GetName()]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal([]byte(value), into); err != nil {
		return false, fmt.Errorf("%s/container.%s: %w", key, ctr.GetName(), err)
	}
	return true, nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	switch p.kind {
	case "device-injector":
		var devices []device
		if _, err := annotation(pod, ctr, "devices.nri.io", &devices); err != nil {
			return nil, nil, err
		}
		for _, d := range devices {
			adj.AddDevice(&api.LinuxDevice{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor})
		}
	case "ulimit-adjuster":
		var limits []ulimit
		if _, err := annotation(pod, ctr, "ulimits.nri.containerd.io", &limits); err != nil {
			return nil, nil, err
		}
		for _, l := range limits {
			adj.AddRlimit(l.Type, l.Hard, l.Soft)
		}
	}
	return adj, nil, nil
}

func main() {
	name := filepath.Base(os.Args[0])
	kind := name
	if _, after, ok := strings.Cut(name, "-"); ok {
		kind = after // IDX-NAME
	}
	if kind != "device-injector" && kind != "ulimit-adjuster" {
		fmt.Fprintf(os.Stderr, "%s: start me as IDX-device-injector or IDX-ulimit-adjuster\n", name)
		os.Exit(2)
	}
	s, err := stub.New(&plugin{kind: kind})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
