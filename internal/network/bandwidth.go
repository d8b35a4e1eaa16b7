package network

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cri-dockerd/cri-dockerd/internal/quantity"
)

// The pod annotations that limit a pod's traffic, as the kubelet's bandwidth shaping reads them.
const (
	IngressBandwidthAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressBandwidthAnnotation  = "kubernetes.io/egress-bandwidth"
)

// Bandwidth is the CNI "bandwidth" capability: rates in bits per second, bursts in bits.
type Bandwidth struct {
	IngressRate  int64 `json:"ingressRate,omitempty"`
	IngressBurst int64 `json:"ingressBurst,omitempty"`
	EgressRate   int64 `json:"egressRate,omitempty"`
	EgressBurst  int64 `json:"egressBurst,omitempty"`
}

// The limits the kubelet accepts for a rate.
var (
	minBandwidth = resource.MustParse("1k")
	maxBandwidth = resource.MustParse("1P")
)

// BandwidthFromAnnotations reads the pod's bandwidth annotations (quantities such as "10M");
// nil when it has neither. The burst is left unlimited, as the kubelet did with dockershim.
func BandwidthFromAnnotations(annotations map[string]string) (*Bandwidth, error) {
	var bw Bandwidth
	for _, a := range []struct {
		key        string
		rate, burt *int64
	}{
		{IngressBandwidthAnnotation, &bw.IngressRate, &bw.IngressBurst},
		{EgressBandwidthAnnotation, &bw.EgressRate, &bw.EgressBurst},
	} {
		value, ok := annotations[a.key]
		if !ok {
			continue
		}
		q, err := quantity.Parse(value)
		if err != nil {
			return nil, fmt.Errorf("annotation %s=%q: %v", a.key, value, err)
		}
		if q.Cmp(minBandwidth) < 0 || q.Cmp(maxBandwidth) > 0 {
			return nil, fmt.Errorf("annotation %s=%q: the rate must be within 1k and 1P bits per second", a.key, value)
		}
		*a.rate, *a.burt = q.Value(), math.MaxInt32
	}
	if bw == (Bandwidth{}) {
		return nil, nil
	}
	return &bw, nil
}
