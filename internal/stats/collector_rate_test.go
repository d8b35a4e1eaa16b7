package stats

import (
	"testing"
	"time"
)

// The CPU rate between two samples: an idle container (no CPU time between the samples) is at 0
// nanocores, not unknown; two readings of one instant (Docker's collector can answer the same
// tick twice) or a counter that went back (a restart) give no rate rather than a division by
// zero or a wrapped uint64.
func TestUsageNanoCoresBetweenTwoSamples(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	sample := func(d time.Duration, cpu uint64) *Sample {
		return &Sample{At: at.Add(d), Running: true, CPUTotal: cpu}
	}
	for _, tc := range []struct {
		name      string
		prev, cur *Sample
		rate      uint64
		ok        bool
	}{
		{"half a core", sample(0, 1e9), sample(time.Second, 1.5e9), 5e8, true},
		{"idle", sample(0, 1e9), sample(2*time.Second, 1e9), 0, true},
		{"the same instant twice", sample(0, 1e9), sample(0, 1e9), 0, false},
		{"counter went back", sample(0, 2e9), sample(time.Second, 1e9), 0, false},
		{"one sample", nil, sample(time.Second, 1e9), 0, false},
	} {
		rate, ok := Snapshot{Prev: tc.prev, Cur: tc.cur}.UsageNanoCores()
		if rate != tc.rate || ok != tc.ok {
			t.Errorf("%s: usageNanoCores = %d, %v; want %d, %v", tc.name, rate, ok, tc.rate, tc.ok)
		}
	}
}
