// Package containerlog writes containers' output to the kubelet's log files, in the CRI log
// format that the kubelet and `crictl logs` read:
//
//	2016-10-06T00:17:09.669794202Z stdout F a whole line
//	2016-10-06T00:17:09.669794202Z stdout P the first part of a long line
//
// Why follow Docker's log stream: Docker already captures every container's output in its
// log driver, with a timestamp per message and a mark on partial lines. A follower per running
// container reads that stream through the Engine API (timestamps on, multiplexed by stream)
// and appends CRI lines to the file. Nothing sits between the container and Docker, so a
// restart of cri-dockerd loses no output: Docker keeps it, and the follower resumes after the
// last line it wrote — read back from the end of the file itself (or, right after a rotation,
// from a small position record under the root directory) — asking Docker for messages since
// that time and skipping those already written. The file, not the record, is the truth, so a
// crash between a write and a record update writes nothing twice.
//
// Only lines that reached the file whole count as written. A write that fails (a full
// filesystem) drops the buffer, cuts the file back to its last whole line and ends the
// stream; the next pass, a retryDelay later, reads again from the last line in the file, so
// that once there is room the lines Docker kept follow without a gap or a repeat.
//
// The kubelet rotates by renaming the file and calling ReopenContainerLog; the follower then
// continues in a new file at the same path. When a container stops, Docker ends the stream
// after its last message: Drained lets ContainerStatus wait for that, so the last lines are in
// the file before the kubelet sees the container exited.
package containerlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/supervise"
	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
)

// Docker is what the manager needs of the Docker client.
type Docker interface {
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	InspectContainer(ctx context.Context, id string) (*container.InspectResponse, error)
}

// ErrNotFollowed is returned for a container whose log is not being followed (not running).
var ErrNotFollowed = errors.New("container log is not being followed")

// Manager runs one follower per container whose log it writes.
type Manager struct {
	docker   Docker
	stateDir string // position records; "" keeps none
	log      *logrus.Entry
	openFile func(path string) (logFile, int64, error) // openLogFile but in tests
	// DockerLogPath is where Docker keeps its own json-file log of container id ("" when
	// unknown), watched for rotations during followed reads; nil watches nothing.
	DockerLogPath func(id string) string
	// WriteFailed, when set, is told of each write to a log file that failed (a full
	// filesystem): its lines are copied again from Docker once a write succeeds.
	WriteFailed func()
	// MaxLineSize is the longest text of a CRI log line (DefaultMaxLineSize when 0): a longer
	// line is written as partial lines.
	MaxLineSize int

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	followers map[string]*follower
	// back is closed when Docker answers again, for the followers that lost it; nil when no
	// follower waits (see retryAfter).
	back chan struct{}
	wg   sync.WaitGroup
}

// NewManager makes a manager that keeps position records under stateDir ("" for none).
func NewManager(docker Docker, stateDir string, log *logrus.Entry) (*Manager, error) {
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("container log state directory: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{docker: docker, stateDir: stateDir, log: log, openFile: openLogFile, ctx: ctx, cancel: cancel, followers: map[string]*follower{}}, nil
}

// Follow starts writing the log of container id to path, unless that already happens. tty
// says whether the container has a terminal (Docker's stream is then not multiplexed). The file
// exists when Follow returns, before any output: the kubelet (and critest) open it as soon as
// StartContainer answers.
func (m *Manager) Follow(id, path string, tty bool) { m.follow(id, path, tty, true) }

// Resume is Follow for a container found at start, without creating the file first: the
// follower creates it when it has something to write. So a container whose log was complete
// when it stopped gets no new file: the kubelet removes the file before the container, and a
// crash in between must not bring it back.
func (m *Manager) Resume(id, path string, tty bool) { m.follow(id, path, tty, false) }

func (m *Manager) follow(id, path string, tty, create bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	if f, ok := m.followers[id]; ok && !f.finished() {
		return
	}
	// The path comes from our own label, checked when the container was created; refuse again
	// what could lead outside the directory it names.
	if err := checkPath(path); err != nil {
		m.log.WithField("container", id).Warnf("not writing its log: %v", err)
		return
	}
	if create {
		if err := createFile(path); err != nil {
			m.log.WithField("container", id).Warnf("create log file: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(m.ctx)
	f := &follower{m: m, id: id, path: path, tty: tty, cancel: cancel, done: make(chan struct{})}
	m.followers[id] = f
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// A follower that panicked has closed its file and is finished: the next Follow
		// (StartContainer, a restart) starts a new one, which resumes where the file ends.
		_ = supervise.Run(m.log.WithField("container", id), "log follower", func() { f.run(ctx) })
	}()
}

// Followers is how many followers run: one per running container whose log is written, and
// per stopped one whose last lines are not written yet.
func (m *Manager) Followers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, f := range m.followers {
		if !f.finished() {
			n++
		}
	}
	return n
}

// Reopen makes the follower of id write to a new file at its path: the kubelet has renamed
// the old one.
func (m *Manager) Reopen(id string) error {
	m.mu.Lock()
	f, ok := m.followers[id]
	m.mu.Unlock()
	if !ok || f.finished() {
		return ErrNotFollowed
	}
	return f.reopen()
}

// Drained waits until the follower of id has written everything Docker had, which happens
// once the container has stopped; it returns at once when id is not followed, or when ctx ends.
func (m *Manager) Drained(ctx context.Context, id string) {
	m.mu.Lock()
	f, ok := m.followers[id]
	m.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// Forget stops following id and drops its position record: the container is gone.
func (m *Manager) Forget(id string) {
	m.mu.Lock()
	f, ok := m.followers[id]
	delete(m.followers, id)
	m.mu.Unlock()
	if ok {
		f.cancel()
		<-f.done
	}
	if m.stateDir != "" {
		_ = os.Remove(m.recordPath(id))
	}
}

// Prune drops the position records of every container but those of keep (full IDs), with the
// temporary files of their interrupted writes: a crash between a container's removal and its
// Forget leaves a record that nothing else would remove. Called at start, with the containers
// Docker has.
func (m *Manager) Prune(keep map[string]bool) {
	if m.stateDir == "" {
		return
	}
	entries, _ := os.ReadDir(m.stateDir)
	for _, e := range entries {
		id, _, _ := strings.Cut(e.Name(), ".") // <id>.json, <id>.json.tmp
		if !keep[id] {
			_ = os.Remove(filepath.Join(m.stateDir, e.Name()))
		}
	}
}

// Close stops every follower after it has saved its position.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

func (m *Manager) recordPath(id string) string {
	return filepath.Join(m.stateDir, id+".json")
}

// retryDelay spaces reconnects when Docker's stream ends while the container still runs
// (e.g. dockerd restarted).
const retryDelay = time.Second

// probeInterval is how often the followers' prober pings Docker while it is unreachable.
const probeInterval = 100 * time.Millisecond

// pinger tells whether Docker answers; libdocker's client has it.
type pinger interface {
	Ping(ctx context.Context) error
}

// retryAfter returns a channel closed when a follower whose stream failed with err may read
// again: retryDelay later, or, when Docker was unreachable (dockerd restarting), once it
// answers again, so that the log catches up at once and ContainerStatus (Drained) does not
// wait out a delay. One prober serves every follower waiting for Docker: pinging it is free,
// N followers dialling it every probeInterval is not.
func (m *Manager) retryAfter(err error) <-chan struct{} {
	p, ok := m.docker.(pinger)
	if !ok || !libdocker.IsUnavailable(err) {
		ch := make(chan struct{})
		time.AfterFunc(retryDelay, func() { close(ch) })
		return ch
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.back == nil {
		back := make(chan struct{})
		m.back = back
		m.wg.Add(1) // by a follower, which the group counts: never from zero
		go func() {
			defer m.wg.Done()
			// Should Docker answer at once, RetryWait waits retryDelay: no busy loop.
			_ = libdocker.RetryWait(m.ctx, p.Ping, probeInterval, retryDelay)
			m.mu.Lock()
			m.back = nil
			m.mu.Unlock()
			close(back)
		}()
	}
	return m.back
}

// checkPath refuses a log path that is not absolute and clean (no "." or ".." components).
func checkPath(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("log path %q is not an absolute clean path", path)
	}
	return nil
}

// createFile creates path unless it exists; it never truncates. Of the directories, it
// creates at most the file's own (the kubelet creates the pod's log directory, and the
// container's below it): never its parents.
func createFile(path string) error {
	if err := mkdirOne(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	return f.Close()
}

// mkdirOne creates dir if its parent exists.
func mkdirOne(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// dockerLogPath is DockerLogPath(id), "" without it.
func (m *Manager) dockerLogPath(id string) string {
	if m.DockerLogPath == nil {
		return ""
	}
	return m.DockerLogPath(id)
}
