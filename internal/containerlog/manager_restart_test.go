package containerlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// restartingDocker is a Docker that a test stops and starts, as a dockerd restart with
// live-restore does: while it is down every call fails as a dial to its socket does, the
// followed log streams end when it stops, and the containers' output written meanwhile is
// there when it is back.
type restartingDocker struct {
	mu      sync.Mutex
	down    bool
	stopped chan struct{} // closed when it stops
	changed chan struct{} // closed when a message is added or a container exits
	logs    map[string][]string
	exited  map[string]bool
	calls   map[string]int
	clock   time.Time // the stamp of the next message
}

func newRestartingDocker() *restartingDocker {
	return &restartingDocker{stopped: make(chan struct{}), changed: make(chan struct{}), logs: map[string][]string{},
		exited: map[string]bool{}, calls: map[string]int{}, clock: time.Now().Add(-time.Hour)}
}

func (d *restartingDocker) enter(method string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[method]++
	if d.down {
		return fmt.Errorf("Cannot connect to the Docker daemon at unix:///test.sock: %w", libdocker.ErrUnavailable)
	}
	return nil
}

func (d *restartingDocker) count(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

func (d *restartingDocker) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
	if down {
		close(d.stopped)
	} else {
		d.stopped = make(chan struct{})
	}
}

// write adds lines to a container's log, each stamped a millisecond after the one before.
func (d *restartingDocker) write(id string, lines ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range lines {
		d.clock = d.clock.Add(time.Millisecond)
		d.logs[id] = append(d.logs[id], d.clock.UTC().Format(time.RFC3339Nano)+" "+l+"\n")
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *restartingDocker) exit(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.exited[id] = true
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *restartingDocker) Ping(context.Context) error { return d.enter("Ping") }

func (d *restartingDocker) InspectContainer(_ context.Context, id string) (*container.InspectResponse, error) {
	if err := d.enter("InspectContainer"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	running := !d.exited[id]
	return &container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: id, State: &container.State{Running: running}}}, nil
}

func (d *restartingDocker) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	if err := d.enter("ContainerLogs"); err != nil {
		return nil, err
	}
	var since time.Time
	if opts.Since != "" {
		sec, nsec, _ := strings.Cut(opts.Since, ".")
		s, _ := strconv.ParseInt(sec, 10, 64)
		n, _ := strconv.ParseInt(nsec, 10, 64)
		since = time.Unix(s, n)
	}
	pr, pw := io.Pipe()
	go func() {
		next := 0
		for {
			d.mu.Lock()
			msgs := d.logs[id][next:]
			next = len(d.logs[id])
			done := !opts.Follow || d.exited[id]
			changed, stopped := d.changed, d.stopped
			d.mu.Unlock()
			var buf bytes.Buffer
			for _, m := range msgs {
				stamp, _, _ := strings.Cut(m, " ")
				if at, _ := time.Parse(time.RFC3339Nano, stamp); !at.Before(since) {
					_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write([]byte(m))
				}
			}
			if _, err := pw.Write(buf.Bytes()); err != nil || done {
				pw.Close()
				return
			}
			select {
			case <-changed:
			case <-stopped: // dockerd's shutdown ends the stream
				pw.Close()
				return
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
		}
	}()
	return pr, nil
}

// The followers of a dockerd that restarted read again as soon as it answers, not a retry
// delay later (up to 1 s: the last lines of a container that exited meanwhile, which
// ContainerStatus waits for, came that much later); one prober pings Docker for all of them
// while it is down, and no follower calls it then. Every line is written once.
func TestFollowersReadAgainAsSoonAsDockerAnswers(t *testing.T) {
	t.Parallel()
	d := newRestartingDocker()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	m, err := NewManager(d, t.TempDir(), logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	dir := t.TempDir()
	ids := []string{"running-1", "running-2", "exits-while-down"}
	for _, id := range ids {
		d.write(id, id+" 1", id+" 2")
		m.Follow(id, filepath.Join(dir, id+".log"), false)
	}
	for _, id := range ids {
		waitFileLines(t, filepath.Join(dir, id+".log"), 2)
	}

	d.setDown(true)
	time.Sleep(100 * time.Millisecond) // the followers find Docker gone
	logsCalls, pings := d.count("ContainerLogs"), d.count("Ping")
	for _, id := range ids {
		d.write(id, id+" 3", id+" 4") // output while dockerd is down, kept for it
	}
	d.exit("exits-while-down")
	time.Sleep(1100 * time.Millisecond) // past the retry delay of 1 s
	if n := d.count("ContainerLogs") - logsCalls; n > 0 {
		t.Errorf("%d log reads while Docker was down, want none", n)
	}
	if n := d.count("Ping") - pings; n < 3 || n > 20 {
		t.Errorf("%d pings in 1.1 s while Docker was down, want about 11: one prober every 100 ms for the %d followers", n, len(ids))
	}

	d.setDown(false)
	up := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Drained(ctx, "exits-while-down")
	if took := time.Since(up); took > 600*time.Millisecond {
		t.Errorf("the log of the container that exited while Docker was down was drained %v after Docker answered, want well within the 1 s retry delay", took)
	}
	for _, id := range ids {
		lines := waitFileLines(t, filepath.Join(dir, id+".log"), 4)
		if took := time.Since(up); took > 600*time.Millisecond && id != "exits-while-down" {
			t.Errorf("%s: its log caught up %v after Docker answered, want well within the 1 s retry delay", id, took)
		}
		for i, l := range lines {
			if want := fmt.Sprintf("stdout F %s %d", id, i+1); !strings.HasSuffix(l, want) {
				t.Errorf("%s: line %d is %q, want it to end in %q", id, i+1, l, want)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, id := range ids {
		if lines := waitFileLines(t, filepath.Join(dir, id+".log"), 4); len(lines) != 4 {
			t.Errorf("%s: %q, want 4 lines, each once", id, lines)
		}
	}
}

// waitFileLines waits (5 s at most, scaled by the load) until a file holds at least n lines, then returns them.
func waitFileLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	if !testutil.PollUntil(5*time.Second, 2*time.Millisecond, func() bool {
		data, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		return len(data) > 0 && len(lines) >= n
	}) {
		t.Fatalf("%s: %q, want %d lines", path, lines, n)
	}
	return lines
}
