package testutil

import (
	"fmt"
	"testing"
	"time"
)

func TestLoadFactorIsLoadPerCPUWithinOneToTen(t *testing.T) {
	for _, c := range []struct {
		loadavg string
		cpus    int
		want    float64
	}{
		{"0.50 0.40 0.30 1/100 42\n", 2, 1},
		{"6.00 1.00 1.00 1/100 42\n", 2, 3},
		{"90.0 1.00 1.00 1/100 42\n", 2, 10},
		{"garbage", 2, 1},
		{"", 2, 1},
		{"4.0 1 1 1/1 1", 0, 1},
	} {
		if got := loadFactor(c.loadavg, c.cpus); got != c.want {
			t.Errorf("loadFactor(%q, %d) = %v, want %v", c.loadavg, c.cpus, got, c.want)
		}
	}
	if f := LoadFactor(); f < 1 || f > 10 {
		t.Errorf("LoadFactor() = %v, want within [1, 10]", f)
	}
}

func TestPollUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	if !PollUntil(time.Minute, time.Millisecond, func() bool { calls++; return calls == 3 }) {
		t.Fatal("PollUntil = false, want true")
	}
	if calls != 3 {
		t.Errorf("%d calls, want 3", calls)
	}
}

func TestPollUntilGivesUpAfterALastCall(t *testing.T) {
	calls := 0
	if PollUntil(0, time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("PollUntil = true, want false")
	}
	// A zero timeout still calls cond, once before and once after the deadline at most.
	if calls < 1 || calls > 2 {
		t.Errorf("%d calls, want 1 or 2", calls)
	}
}

// recorder is a testing.TB whose Fatalf records instead of ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyFailsWithTheMessage(t *testing.T) {
	r := &recorder{TB: t}
	Eventually(r, 0, time.Millisecond, func() bool { return false }, "waiting for %s", "the thing")
	if r.msg != "waiting for the thing" {
		t.Errorf("Fatalf message %q", r.msg)
	}
	r.msg = ""
	Eventually(r, time.Minute, time.Millisecond, func() bool { return true }, "never")
	if r.msg != "" {
		t.Errorf("Fatalf called (%q) although the condition held", r.msg)
	}
}
