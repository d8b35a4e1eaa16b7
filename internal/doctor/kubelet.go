package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"go.yaml.in/yaml/v3"
)

// DefaultKubeletConfig is where kubeadm (and kubespray, minikube) write the kubelet's config.
const DefaultKubeletConfig = "/var/lib/kubelet/config.yaml"

// statsFromCRIGate is the kubelet's gate that takes pod and container stats and
// /metrics/cadvisor from the CRI: on Docker, cAdvisor alone knows no pod or container.
const statsFromCRIGate = "PodAndContainerStatsFromCRI"

// KubeletChecks looks at the kubelet's config file at path for what a Docker node needs: the
// kubelet's pod metrics come from cri-dockerd only with PodAndContainerStatsFromCRI on. A
// missing file at the default path is a node whose kubelet is configured otherwise: one line
// says so.
func KubeletChecks(path string) []Check {
	const name = "kubelet config"
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && path == DefaultKubeletConfig {
		return []Check{{Name: name, Status: OK, Detail: fmt.Sprintf("no %s (a kubelet without kubeadm's config file); --kubelet-config names another", path)}}
	}
	if err != nil {
		return []Check{{Name: name, Status: Warn, Detail: fmt.Sprintf("cannot read %s: %v", path, err)}}
	}
	var cfg struct {
		Kind         string          `yaml:"kind"`
		FeatureGates map[string]bool `yaml:"featureGates"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil || cfg.Kind != "KubeletConfiguration" {
		return []Check{{Name: name, Status: Warn, Detail: fmt.Sprintf("%s is not a KubeletConfiguration (%v)", path, err)}}
	}
	if !cfg.FeatureGates[statsFromCRIGate] {
		return []Check{{Name: name, Status: Warn, Detail: fmt.Sprintf(
			"%s leaves featureGates.%s off: the kubelet's /metrics/cadvisor then has no pod or container labels for pods on Docker "+
				"(cAdvisor knows no Docker container); set `featureGates: {%s: true}` to take them from cri-dockerd",
			path, statsFromCRIGate, statsFromCRIGate)}}
	}
	return []Check{{Name: name, Status: OK, Detail: fmt.Sprintf("%s: %s on, pod metrics come from cri-dockerd", path, statsFromCRIGate)}}
}
