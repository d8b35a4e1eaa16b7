// Package testutil holds helpers shared by the module's tests: the unit tests under internal/
// and cmd/, and the integration tests. Only _test.go files and integration/ import it.
package testutil

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scaled stretches a deadline by how loaded the machine is when the wait begins: by the
// 1-minute load average per CPU, at least 1 and at most 10 times. A deadline is there to end a
// test that would otherwise hang, never to judge speed; on a CI machine at load 15 on 2 cores,
// Docker and our daemon get a fraction of the CPU the deadline was written for.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * LoadFactor())
}

// LoadFactor is the factor Scaled applies now: the 1-minute load average per CPU, clamped to
// [1, 10]; 1 where /proc/loadavg cannot be read.
func LoadFactor() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	return loadFactor(string(raw), runtime.NumCPU())
}

func loadFactor(loadavg string, cpus int) float64 {
	first, _, _ := strings.Cut(loadavg, " ")
	load, err := strconv.ParseFloat(first, 64)
	if err != nil || cpus < 1 {
		return 1
	}
	return min(max(load/float64(cpus), 1), 10)
}

// PollUntil calls cond every interval until it holds (true) or Scaled(timeout) has passed
// (false, after a last call). The first call is immediate.
func PollUntil(timeout, interval time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(Scaled(timeout)); ; time.Sleep(interval) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Eventually is PollUntil that ends the test with t.Fatalf(format, args...) when cond never
// holds. The arguments are taken when Eventually is called: where the message should show
// the state cond saw last, use PollUntil and report it yourself.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !PollUntil(timeout, interval, cond) {
		t.Fatalf(format, args...)
	}
}
