//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// mountTmpfs mounts a tmpfs of the given size on a new directory, unmounted when the test ends
// (pass, fail or panic).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillUp writes path until its filesystem has no room left.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{64 << 10, 4 << 10, 512, 1} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", path, err)
				}
				break
			}
		}
	}
}

// dockerLastNumber is the number of the last "n=N" line Docker has of a container (0 if none).
func dockerLastNumber(t *testing.T, id string) int {
	t.Helper()
	rc, err := suite.docker.ContainerLogs(t.Context(), id, container.LogsOptions{ShowStdout: true, Tail: "1"})
	if err != nil {
		t.Fatalf("docker logs: %v", err)
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	fields := strings.Fields(strings.TrimPrefix(out.String(), "n="))
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(fields[0])
	return n
}

// checkNumbered fails unless the file's lines are exactly "n=1 …" to "n=last …", whole, in
// order, once each.
func checkNumbered(t *testing.T, path string, last int, pad string) {
	t.Helper()
	lines := readCRILog(t, path)
	next := 1
	for i, l := range lines {
		want := fmt.Sprintf("n=%d %s", next, pad)
		if l.tag != "F" || l.content != want {
			t.Errorf("line %d of %s is %.80q (tag %s), want %.80q: the lines before it are n=1..%d", i, path, l.content, l.tag, want, next-1)
			for _, near := range lines[max(i-2, 0):min(i+3, len(lines))] {
				t.Logf("  %s %s %s %.20q", near.at.Format(time.RFC3339Nano), near.stream, near.tag, near.content)
			}
			return
		}
		next++
	}
	if next-1 != last {
		t.Errorf("%s holds n=1..%d, want n=1..%d", path, next-1, last)
	}
}

// TestFullLogFilesystemLosesNoLine: the pod's log directory is on a small tmpfs that a filler
// file fills while a container prints numbered lines; once the filler is gone, every line is
// in the CRI log exactly once, in order, none cut or joined, and cri-dockerd warned about the
// full filesystem a few times, not at every retry.
func TestFullLogFilesystemLosesNoLine(t *testing.T) {
	d := StartDaemon(t)
	dir := mountTmpfs(t, "2m")
	podCfg := newPodConfig(t, "fulllog")
	podCfg.LogDirectory = dir
	sandboxID := runPod(t, d, podCfg, "")
	const total = 4000
	pad := strings.Repeat("x", 80)
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("counter", fmt.Sprintf(
		`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "n=$i %s"; [ $((i%%20)) -eq 0 ] && sleep 0.1; done`, total, pad)))
	startContainer(t, d, ctrID)
	path := filepath.Join(dir, "counter.log")
	count := func() int {
		data, _ := os.ReadFile(path)
		return bytes.Count(data, []byte("\n"))
	}
	waitFor(t, "first lines", func() bool { return count() >= 100 })

	filler := filepath.Join(dir, "filler")
	fillUp(t, filler)
	fullAt := time.Now()
	waitFor(t, "the warning of a full filesystem", func() bool {
		return strings.Contains(d.readLog(), "no space left on device")
	})
	atFull := dockerLastNumber(t, ctrID)
	waitFor(t, "500 more lines in Docker's log while full", func() bool { return dockerLastNumber(t, ctrID) >= atFull+500 })
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	fullFor := time.Since(fullAt)
	t.Logf("full for %s, from n=%d on, %d lines in the file then", fullFor.Round(time.Millisecond), atFull, count())

	// Waits on the content, generously: the machine is shared.
	testutil.PollUntil(2*time.Minute, 100*time.Millisecond, func() bool { return count() >= total })
	waitExited(t, d, ctrID)
	checkNumbered(t, path, total, pad)
	warnings := strings.Count(d.readLog(), "no space left on device")
	if limit := 2 + int(time.Since(fullAt)/(10*time.Second)); warnings > limit {
		t.Errorf("%d warnings of the full filesystem in %s: want at most %d", warnings, time.Since(fullAt).Round(time.Second), limit)
	}
}
