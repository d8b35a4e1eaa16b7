//go:build integration

package integration

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// criLine is one line of a CRI log file.
type criLine struct {
	at                   time.Time
	stream, tag, content string
}

// readCRILog parses a CRI log file strictly: every line must be in the kubelet's format.
func readCRILog(t *testing.T, path string) []criLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var out []criLine
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, " ", 4)
		if len(parts) != 4 {
			t.Fatalf("%s: not a CRI log line: %q", path, line)
		}
		at, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil || (parts[1] != "stdout" && parts[1] != "stderr") || (parts[2] != "F" && parts[2] != "P") {
			t.Fatalf("%s: not a CRI log line: %q", path, line)
		}
		out = append(out, criLine{at, parts[1], parts[2], parts[3]})
	}
	return out
}

// waitFor is the integration tests' Eventually: 15 s (scaled), polled every 50 ms.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, cond, "timed out waiting for %s", what)
}

func TestContainerLogIsInCRIFormatWithStreamsAndPartialLines(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "crilog")
	sandboxID := runPod(t, d, podCfg, "")
	// A line longer than Docker's 16 KiB message limit arrives in parts: P then F.
	long := strings.Repeat("x", 20000)
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", "echo to-stdout; echo to-stderr >&2; echo "+long+"; printf no-newline-at-exit"))
	startContainer(t, d, ctrID)
	st := waitExited(t, d, ctrID)
	lines := readCRILog(t, st.LogPath)
	var got []string
	for _, l := range lines {
		got = append(got, l.stream+" "+l.tag+" "+strconv.Itoa(len(l.content)))
	}
	joined := strings.Join(got, ",")
	for _, want := range []string{"stdout F 9", "stderr F 9", "stdout P 16384", "stdout F " + strconv.Itoa(20000-16384), "stdout P 18"} {
		if !strings.Contains(joined, want) {
			t.Errorf("log lines [%s] lack %q", joined, want)
		}
	}
	if fi, err := os.Lstat(st.LogPath); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("log path %s is a symlink or missing (%v): it must be our own file", st.LogPath, err)
	}
}

// A terminal that writes without a newline does not grow the runtime: its endless line reaches
// the log file as partial lines of --max-container-log-line-size (16 KiB) as it comes, with
// nothing lost, while cri-dockerd's peak resident set stays near where it was. (Reading up to
// the line's end held all of it, 276 MiB for 256 MiB written.)
func TestEndlessTerminalLineIsCutAndHoldsNoMemory(t *testing.T) {
	const size = 64 << 20
	// Docker's own log must keep the whole output, for the count below on a slow machine.
	d := StartDaemon(t, "--docker-log-max-size", "200m")
	podCfg := newPodConfig(t, "endless")
	sandboxID := runPod(t, d, podCfg, "")
	cfg := containerConfig("tty", "yes x | tr -d '\\n' | head -c "+strconv.Itoa(size))
	cfg.Tty = true
	ctrID := createContainer(t, d, sandboxID, podCfg, cfg)
	before := d.peakRSS()
	startContainer(t, d, ctrID)
	var st *runtimeapi.ContainerStatus
	testutil.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() bool {
		resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		st = resp.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	}, "the container writing %d MiB did not exit", size>>20)
	// The last lines may land after the drain that ContainerStatus waits for (it is bounded).
	var text, partial, full int
	testutil.Eventually(t, time.Minute, 500*time.Millisecond, func() bool {
		text, partial, full = 0, 0, 0
		for _, l := range readCRILog(t, st.LogPath) {
			text += len(l.content)
			if len(l.content) > 16<<10 {
				t.Fatalf("a log line of %d bytes, over 16 KiB", len(l.content))
			}
			if l.tag == "P" {
				partial++
			} else {
				full++
			}
		}
		return text >= size
	}, "the log did not reach the %d bytes written", size)
	after := d.peakRSS()
	if text != size || partial != size/(16<<10) || full != 0 {
		t.Errorf("log holds %d bytes in %d partial and %d full lines, want %d in %d partial lines", text, partial, full, size, size/(16<<10))
	}
	t.Logf("peak RSS %d MiB before, %d MiB after %d MiB without a newline", before>>20, after>>20, size>>20)
	if grew := after - before; grew > 32<<20 {
		t.Errorf("cri-dockerd's peak resident set grew by %d MiB while the container wrote %d MiB without a newline", grew>>20, size>>20)
	}
}

// waitExited waits until ContainerStatus reports the container exited, and returns the status:
// by then its last lines must be in the log file.
func waitExited(t *testing.T, d *Daemon, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	waitFor(t, "container exit", func() bool {
		resp, err := d.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		st = resp.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	return st
}

// TestNumberedLinesSurviveRestartsAndRotation: a container writes a numbered line every 10 ms
// while cri-dockerd is stopped cleanly, killed, and its log rotated; afterwards every number is
// in the log files exactly once.
func TestNumberedLinesSurviveRestartsAndRotation(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "numbered")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("counter",
		`i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo n=$i; sleep 0.01; done`))
	startContainer(t, d, ctrID)
	path := filepath.Join(podCfg.LogDirectory, "counter.log")
	count := func(p string) int {
		data, _ := os.ReadFile(p)
		return strings.Count(string(data), "\n")
	}
	waitFor(t, "first lines", func() bool { return count(path) > 50 })

	d.Restart() // SIGTERM, then start again
	time.Sleep(300 * time.Millisecond)
	_ = d.cmd.Process.Kill() // a crash: no chance to save anything
	<-d.done
	time.Sleep(300 * time.Millisecond)
	d.Start()

	waitFor(t, "more lines", func() bool { return count(path) > 250 })
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.ReopenContainerLog(t.Context(), &runtimeapi.ReopenContainerLogRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	d.Restart() // right after a rotation: the new file is nearly empty
	waitExited(t, d, ctrID)

	seen := map[int]int{}
	for _, p := range []string{path + ".1", path} {
		for _, l := range readCRILog(t, p) {
			n, err := strconv.Atoi(strings.TrimPrefix(l.content, "n="))
			if err != nil || l.stream != "stdout" || l.tag != "F" {
				t.Errorf("%s: unexpected line %+v", p, l)
				continue
			}
			seen[n]++
		}
	}
	for i := 1; i <= 600; i++ {
		if seen[i] != 1 {
			t.Errorf("n=%d appears %d times", i, seen[i])
		}
	}
	if t.Failed() {
		return
	}
	// Rotation happened mid-run: both files hold part of the output.
	if count(path+".1") == 0 || count(path) == 0 {
		t.Errorf("rotated file has %d lines, new file %d: want both non-empty", count(path+".1"), count(path))
	}
}

func TestReopenContainerLogOfStoppedOrUnknownContainerFails(t *testing.T) {
	d := StartDaemon(t)
	podCfg := newPodConfig(t, "reopen")
	sandboxID := runPod(t, d, podCfg, "")
	ctrID := createContainer(t, d, sandboxID, podCfg, containerConfig("app", "echo done"))
	startContainer(t, d, ctrID)
	waitExited(t, d, ctrID)
	_, err := d.Runtime.ReopenContainerLog(t.Context(), &runtimeapi.ReopenContainerLogRequest{ContainerId: ctrID})
	wantCode(t, err, codes.FailedPrecondition, "not running")
	_, err = d.Runtime.ReopenContainerLog(t.Context(), &runtimeapi.ReopenContainerLogRequest{ContainerId: "nope"})
	wantCode(t, err, codes.NotFound)
	_, err = d.Runtime.ReopenContainerLog(t.Context(), &runtimeapi.ReopenContainerLogRequest{})
	wantCode(t, err, codes.InvalidArgument)
	// RemoveContainer drops our position record.
	if _, err := d.Runtime.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Dir, "root", "containerlogs", ctrID+".json")); !os.IsNotExist(err) {
		t.Errorf("position record of a removed container: %v", err)
	}
}

// BenchmarkLogThroughput: a container writes lines as fast as it can; how many lines per
// second reach its CRI log file (ContainerStatus reports the exit only once all are there),
// against the same container run with the Docker client and its log read back through the
// Engine API in the same run.
//
//	go test -tags integration -run XXX -bench LogThroughput -benchtime=3x ./integration/
func BenchmarkLogThroughput(b *testing.B) {
	const lines = 100000
	script := "seq 1 " + strconv.Itoa(lines)
	d := StartDaemon(b)
	ctx := b.Context()
	var criTotal, dockerTotal time.Duration
	for i := 0; i < b.N; i++ {
		podCfg := newPodConfig(b, "logbench")
		sandboxID := runPod(b, d, podCfg, "")
		ctrID := createContainer(b, d, sandboxID, podCfg, containerConfig("seq", script))
		start := time.Now()
		startContainer(b, d, ctrID)
		for {
			resp, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
			if err != nil {
				b.Fatal(err)
			}
			if resp.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		criTotal += time.Since(start)
		data, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, "seq.log"))
		if err != nil || strings.Count(string(data), "\n") != lines {
			b.Fatalf("CRI log has %d lines (%v), want %d", strings.Count(string(data), "\n"), err, lines)
		}

		// The same through Docker alone: run, wait for the exit, read the whole log back.
		m := podCfg.Metadata
		start = time.Now()
		id := mustCreate(b, ctx, "k8s_seqraw_"+m.Name+"_"+m.Namespace+"_"+m.Uid+"_0",
			&container.Config{Image: busyboxImage, Entrypoint: strslice.StrSlice{"sh", "-c", script}}, &container.HostConfig{})
		waitC, errC := suite.docker.ContainerWait(ctx, id, container.WaitConditionNotRunning)
		select {
		case <-waitC:
		case err := <-errC:
			b.Fatal(err)
		}
		rc, err := suite.docker.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n == 0 {
			b.Fatalf("docker logs: %d bytes, %v", n, err)
		}
		dockerTotal += time.Since(start)
		_ = suite.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	}
	b.ReportMetric(float64(lines*b.N)/criTotal.Seconds(), "cri-lines/s")
	b.ReportMetric(float64(lines*b.N)/dockerTotal.Seconds(), "docker-lines/s")
	b.ReportMetric(float64(criTotal)/float64(dockerTotal), "time-ratio")
}
