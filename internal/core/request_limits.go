package core

import "math"

// maxRequestSeconds bounds a duration a request gives in seconds. time.Duration holds about 292
// years, so seconds*time.Second wraps above that; libdocker also adds its own call timeout to a
// stop timeout, and dockerd multiplies the seconds again. A century is "forever" for any caller
// and leaves room for both.
const maxRequestSeconds = 100 * 365 * 24 * 60 * 60

// boundedSeconds clamps a request's non-negative timeout in seconds so that converting it to a
// time.Duration cannot overflow. containerd multiplies without a check (MaxInt64 seconds wraps to
// a negative duration there, which it treats as no timeout); clamping keeps that meaning for huge
// values and makes it hold for every value, where the wrapped product failed at once.
func boundedSeconds(seconds int64) int64 {
	return min(seconds, maxRequestSeconds)
}

// addSaturating adds two sizes from a request (a limit and its overhead, a memory limit and a
// swap allowance) without wrapping to a negative value: a sum above int64 is MaxInt64.
func addSaturating(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
