package core

import (
	"errors"
	"testing"
)

func TestGetBuildsOncePerKey(t *testing.T) {
	var c keptListCache[int]
	builds := 0
	build := func() (int, error) { builds++; return builds, nil }
	for i, tc := range []struct {
		key    listKeyCounts
		want   int
		builds int
	}{
		{listKeyCounts{1, 1}, 1, 1},
		{listKeyCounts{1, 1}, 1, 1}, // same key: the same value, no build
		{listKeyCounts{2, 1}, 2, 2}, // one source changed
		{listKeyCounts{2, 2}, 3, 3}, // the other
		{listKeyCounts{1, 1}, 4, 4}, // an older key is another key too
		{listKeyCounts{1, 1}, 4, 4},
	} {
		got, err := c.Get(tc.key, build)
		if err != nil || got != tc.want || builds != tc.builds {
			t.Errorf("step %d: Get(%v) = %d, %v after %d builds; want %d after %d", i, tc.key, got, err, builds, tc.want, tc.builds)
		}
	}
}

func TestAFailedBuildIsNotKept(t *testing.T) {
	var c keptListCache[string]
	if _, err := c.Get(listKeyCounts{1, 0}, func() (string, error) { return "partial", errors.New("docker away") }); err == nil {
		t.Fatal("the build's error was not returned")
	}
	got, err := c.Get(listKeyCounts{1, 0}, func() (string, error) { return "built", nil })
	if err != nil || got != "built" {
		t.Errorf("after a failed build: %q, %v; want a new build", got, err)
	}
}
