package core

import (
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/quantity"
)

// Pod annotations that size the pod's /dev/shm. CRI has no field for it; Docker gives every
// shareable IPC namespace a 64 MiB tmpfs unless told otherwise. CRI-O's key is read too, so
// that pods written for CRI-O keep their size.
const (
	shmSizeAnnotation     = "io.cri-dockerd.shm-size"
	crioShmSizeAnnotation = "io.kubernetes.cri-o.ShmSize"
)

// sandboxShmSize is the /dev/shm size in bytes that the pod's annotations ask for; 0 keeps
// Docker's default. Ours wins over CRI-O's when both are set.
func sandboxShmSize(cfg *runtimeapi.PodSandboxConfig) (int64, error) {
	for _, key := range []string{shmSizeAnnotation, crioShmSizeAnnotation} {
		value, set := cfg.GetAnnotations()[key]
		if !set {
			continue
		}
		q, err := quantity.Parse(value)
		if err != nil {
			return 0, invalidf("pod annotation %s=%q: %v; want a size such as 128Mi or 1Gi", key, value, err)
		}
		// A tmpfs cannot hold more than the node's RAM and swap (its pages are the pod's memory),
		// so a larger size is a mistake (1Ei for 1Gi), never a need; Docker would take it.
		// (Compared as quantities: Value() of one past int64, 1e100, is not the number.)
		if limit := maxShmSize(); q.Cmp(*resource.NewQuantity(limit, resource.BinarySI)) > 0 {
			return 0, invalidf("pod annotation %s=%q: larger than the node's memory and swap (%d bytes)", key, value, limit)
		}
		if q.Value() < 4096 {
			return 0, invalidf("pod annotation %s=%q: want a size of at least 4Ki, such as 128Mi or 1Gi", key, value)
		}
		return q.Value(), nil
	}
	return 0, nil
}

// maxShmSize bounds a pod's /dev/shm: the node's memory and swap, or 1 TiB when unknown.
func maxShmSize() int64 {
	if m := nodeMemory(); m > 0 {
		return m
	}
	return 1 << 40
}
