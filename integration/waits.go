//go:build integration

package integration

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// scaled stretches a deadline by how loaded the machine is when the wait begins: by the
// 1-minute load average per CPU, at least 1 and at most 10 times. A deadline is there to end a
// test that would otherwise hang, never to judge speed; on a CI machine at load 15 on 2 cores,
// Docker and our daemon get a fraction of the CPU the deadline was written for.
func scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * loadFactor())
}

func loadFactor() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	first, _, _ := strings.Cut(string(raw), " ")
	load, err := strconv.ParseFloat(first, 64)
	if err != nil {
		return 1
	}
	return min(max(load/float64(runtime.NumCPU()), 1), 10)
}

// pollUntil calls cond every interval until it holds (true) or scaled(timeout) has passed
// (false, after a last call).
func pollUntil(timeout, interval time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(scaled(timeout)); ; time.Sleep(interval) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
