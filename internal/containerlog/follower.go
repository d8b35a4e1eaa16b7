package containerlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// recordEvery bounds how often a follower rewrites its position record while it writes.
const recordEvery = time.Second

// follower copies one container's log from Docker into its CRI log file.
type follower struct {
	m      *Manager
	id     string
	path   string
	tty    bool
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex // guards what follows: the writes and the reopen of the file
	file logFile
	// size is where the last whole line written to the file ends; torn says the file may hold
	// a cut line past it (a write was short, and cutting it off failed too).
	size int64
	torn bool
	// buf holds CRI lines not yet in the file, up to pend; pos is the position of what is
	// in the file, the only one that is ever recorded.
	buf  []byte
	pend position
	pos  position
	// failed is the error of a write that lost the buffer: the stream stops, and the next
	// pass reads again from pos.
	failed   error
	trouble  writeTrouble
	recorded time.Time
	// rotation watches Docker's own log file during a followed pass (docker_rotation.go).
	rotation rotationWatch
}

func (f *follower) finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *follower) logf(format string, args ...any) {
	f.m.log.WithField("container", f.id).Warnf(format, args...)
}

// run follows the log until the container stops, the manager closes, or Forget.
func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	f.pos = f.resume()
	if f.pos.Done {
		// Written to the end when the container stopped; unless it runs again, nothing to do.
		c, err := f.m.docker.InspectContainer(ctx, f.id)
		if err != nil || c.State == nil || !c.State.Running {
			return
		}
		f.pos.Done = false
	}
	if err := f.open(); err != nil {
		f.logf("open log %s: %v", f.path, err)
		return
	}
	defer f.closeFile()
	for {
		err := f.copyStream(ctx, true)
		werr := f.flush()
		if errors.Is(werr, errDockerRotated) && ctx.Err() == nil {
			// A plain read from the last line written gets what the followed stream skipped.
			f.m.log.WithField("container", f.id).Debug("docker rotated its log file: reading again from the last line written")
			err = f.copyStream(ctx, false)
			if werr = f.flush(); werr == nil {
				continue
			}
		}
		if ctx.Err() != nil {
			f.saveRecord()
			return
		}
		// Docker ends a followed stream when the container stops: then the log is complete.
		c, ierr := f.m.docker.InspectContainer(ctx, f.id)
		if cerrdefs.IsNotFound(ierr) {
			// Removed (the stream ended with "marked for removal"): nothing left to write.
			return
		}
		if werr == nil && err != nil && !errors.Is(err, io.EOF) {
			f.logf("reading the log from Docker: %v", err)
		}
		if werr == nil && ierr == nil && c.State != nil && !c.State.Running && !c.State.Restarting {
			if f.finish(ctx) {
				return
			}
			werr = errWriteAgain
		}
		retryErr := ierr
		if ierr == nil {
			retryErr = err
		}
		if werr != nil {
			retryErr = werr // Docker answered: only the file needs time
		}
		select {
		case <-ctx.Done():
			f.saveRecord()
			return
		case <-f.m.retryAfter(retryErr):
		}
	}
}

// errWriteAgain stands for a write that failed after Docker's stream ended: the pass is read
// again later.
var errWriteAgain = errors.New("log file write failed")

// finish writes the end of a stopped container's log and records it complete; false when the
// write failed, to be tried again.
func (f *follower) finish(ctx context.Context) bool {
	// Docker may end a followed stream before the message it writes at the container's exit
	// (the unterminated last line): one plain read from where we stand gets it.
	err := f.copyStream(ctx, false)
	werr := f.flush()
	if werr != nil {
		return false
	}
	if err != nil && !errors.Is(err, io.EOF) {
		f.logf("reading the end of the log from Docker: %v", err)
	}
	f.mu.Lock()
	f.pos.Done = true
	f.mu.Unlock()
	f.saveRecord()
	return true
}

// resume finds where a previous follower of this container stopped: the later of the end of
// the file and the position record (the file is new and empty right after a rotation). A file
// that began after a rotation, all of whose lines carry the stamp of the lines written before
// it, continues their count.
func (f *follower) resume() position {
	var rec position
	if f.m.stateDir != "" {
		rec = loadRecord(f.m.recordPath(f.id))
	}
	fromFile, whole, err := filePosition(f.path)
	if err != nil {
		f.logf("read the end of %s: %v", f.path, err)
	}
	if whole && fromFile.Time.Equal(rec.FileTime) {
		fromFile.Count += rec.FileCount
	}
	fromFile.FileTime, fromFile.FileCount = rec.FileTime, rec.FileCount
	if fromFile.after(rec) {
		fromFile.Done = false
		return fromFile
	}
	return rec
}

func (f *follower) open() error {
	if err := mkdirOne(filepath.Dir(f.path)); err != nil {
		return err
	}
	file, size, err := f.m.openFile(f.path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.file, f.size, f.torn = file, size, false
	f.mu.Unlock()
	return nil
}

func (f *follower) closeFile() {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.flushLocked()
	if f.file != nil {
		f.file.Close()
		f.file, f.buf = nil, nil
	}
}

// flush writes the buffered lines; it returns the error of a write that lost them, in this
// call or in the stream's pass before.
func (f *follower) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

// flushLocked writes the buffered lines to the file. Only lines that reach it whole count as
// written: after a failed or short write (a full filesystem) the file is cut back to the end
// of its last whole line and the buffer is dropped, so that the stream stops and its next pass
// reads those lines again from Docker, which keeps them, from the last good position.
func (f *follower) flushLocked() error {
	if f.failed != nil {
		return f.failed
	}
	if len(f.buf) == 0 || f.file == nil {
		return nil
	}
	if f.rotation.rotated() {
		// What this pass read since Docker's rotation may follow a gap: read again.
		f.buf = f.buf[:0]
		f.pend = f.pos
		f.failed = errDockerRotated
		return f.failed
	}
	err := f.cutTornLocked()
	if err == nil {
		var n int
		n, err = f.file.Write(f.buf)
		if err == nil {
			f.size += int64(n)
			f.pos.Time, f.pos.Count = f.pend.Time, f.pend.Count
			f.buf = f.buf[:0]
			f.trouble.recovered(f)
			return nil
		}
		f.torn = f.torn || n > 0
		if cerr := f.cutTornLocked(); cerr != nil {
			err = fmt.Errorf("%w (cutting the partial line off: %v)", err, cerr)
		}
	}
	if f.m.WriteFailed != nil {
		f.m.WriteFailed()
	}
	f.trouble.failed(f, err, bytes.Count(f.buf, []byte("\n")))
	f.buf = f.buf[:0]
	f.pend = f.pos
	f.failed = err
	return err
}

// cutTornLocked cuts off what a short write left after the last whole line, so that no later
// line is joined to it.
func (f *follower) cutTornLocked() error {
	if !f.torn {
		return nil
	}
	if err := f.file.Truncate(f.size); err != nil {
		return err
	}
	f.torn = false
	return nil
}

// reopen switches to a new file at the same path, after the kubelet renamed the old one.
func (f *follower) reopen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return ErrNotFollowed
	}
	// Lines that do not reach the old file are read again from Docker into the new one.
	_ = f.flushLocked()
	file, size, err := f.m.openFile(f.path)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", f.path, err)
	}
	f.file.Close()
	f.file, f.size, f.torn = file, size, false
	// The new file is empty: from now on only the record knows the position, and where the
	// new file began.
	f.pos.FileTime, f.pos.FileCount = f.pos.Time, f.pos.Count
	f.saveRecordLocked()
	return nil
}

func (f *follower) saveRecord() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saveRecordLocked()
}

func (f *follower) saveRecordLocked() {
	if f.m.stateDir == "" {
		return
	}
	if err := saveRecord(f.m.recordPath(f.id), f.pos); err != nil {
		f.logf("save log position: %v", err)
	}
	f.recorded = time.Now()
}

// copyStream reads one stream from Docker, from the current position, to its end; a followed
// stream ends when the container stops. Where Docker's own file can be watched, a followed
// stream is preceded by a plain read: a followed read that begins after Docker rotated its
// file skips what the rotated files hold, and a plain one does not.
func (f *follower) copyStream(ctx context.Context, follow bool) error {
	if !follow {
		return f.copyOnce(ctx, false, rotationWatch{})
	}
	watch := watchRotation(f.m.dockerLogPath(f.id), true)
	if watch.known {
		if err := f.copyOnce(ctx, false, rotationWatch{}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := f.flush(); err != nil {
			return err
		}
	}
	return f.copyOnce(ctx, true, watch)
}

// copyOnce reads one stream from Docker from the current position, watching Docker's file
// for rotations as watch says.
func (f *follower) copyOnce(ctx context.Context, follow bool, watch rotationWatch) error {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow, Timestamps: true}
	f.mu.Lock()
	f.failed = nil // a new pass, from the last line in the file
	f.rotation = watch
	from := f.pos
	f.mu.Unlock()
	if !from.Time.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", from.Time.Unix(), from.Time.Nanosecond())
	}
	stream, err := f.m.docker.ContainerLogs(ctx, f.id, opts)
	if err != nil {
		return err
	}
	defer stream.Close()
	r := newMessageReader(stream, f.tty, f.m.MaxLineSize)
	seen := 0          // lines of messages stamped exactly from.Time offered in this pass
	last := lastSent{} // per stream, in this pass
	for {
		streamName, msg, err := r.next()
		if err != nil {
			return err
		}
		stamp, content, ok := bytes.Cut(msg, []byte(" "))
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, string(stamp))
		if err != nil {
			continue
		}
		if last.sentAgain(streamName, at, msg, r.Whole()) {
			continue
		}
		if at.Equal(from.Time) {
			seen += criLines(content)
			if seen <= from.Count {
				continue
			}
		} else if at.Before(from.Time) {
			continue
		}
		if err := f.write(at, streamName, content, r.Buffered() == 0); err != nil {
			return err
		}
	}
}

// lastSent is, for each stream of a pass, the last message and its stamp.
type lastSent map[string]struct {
	at  time.Time
	msg []byte
}

// sentAgain reports whether a message of stream stamped at, after those noted, is one Docker
// sent before, and notes it otherwise. Docker stamps the messages of one stream in order (the
// parts of a long line share the stamp of its first part), yet its json-file reader, following
// a file that is being written, sometimes sends a line twice, or goes back and sends a run of
// lines again. So within a stream a message stamped before the last is such a repeat, and so is
// the last whole line again with its stamp. The two streams are stamped apart (stdout's and
// stderr's copiers), so one's stamps are never held against the other's, and equal text with
// a stamp of its own is a line of its own. Only whole messages are compared: a piece of a
// longer message cut at the line size (whole false) is not one of Docker's, and the next
// message, which may carry the same stamp (as Docker's parts of one line do), may hold the
// same text.
func (l lastSent) sentAgain(stream string, at time.Time, msg []byte, whole bool) bool {
	prev, ok := l[stream]
	if ok && (at.Before(prev.at) || (whole && at.Equal(prev.at) && bytes.HasSuffix(msg, []byte("\n")) && bytes.Equal(msg, prev.msg))) {
		return true
	}
	kept := prev.msg[:0]
	if whole {
		kept = append(kept, msg...)
	}
	l[stream] = struct {
		at  time.Time
		msg []byte
	}{at, kept}
	return false
}

// logBufferSize is the write buffer of a followed log file: flushed at every message end that
// the stream pauses after, so a chatty container makes few writes.
const logBufferSize = 64 << 10

// criLines is how many CRI lines write makes of a message: one per line of it.
func criLines(content []byte) int {
	return bytes.Count(bytes.TrimSuffix(content, []byte("\n")), []byte("\n")) + 1
}

// write appends a message as CRI lines. A message without a trailing newline is part of a
// longer line (Docker splits lines at 16 KiB) or output not ended yet: tag P; a whole line: tag
// F. A message holding newlines inside (Docker sends one line per message, but a log stream
// is not ours to trust) becomes one F line per line, so that no text makes a line of its own
// that is not in the CRI format; the position counts lines, as filePosition does. An error
// means the buffered lines were lost: the stream must stop.
func (f *follower) write(at time.Time, stream string, content []byte, flush bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed != nil {
		return f.failed
	}
	if f.file == nil {
		return nil // not open
	}
	if f.buf == nil {
		// Allocated on the first write, not at open: a node's many quiet containers (pause
		// containers have no log at all) hold no 64 KiB buffer each.
		f.buf = make([]byte, 0, logBufferSize)
	}
	if len(f.buf) == 0 {
		f.pend = f.pos
	}
	stamp := at.UTC().Format(time.RFC3339Nano)
	for {
		tag, line, rest := "P", content, []byte(nil)
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			tag, line, rest = "F", content[:i], content[i+1:]
		}
		f.buf = append(f.buf, stamp...)
		f.buf = append(f.buf, ' ')
		f.buf = append(f.buf, stream...)
		f.buf = append(f.buf, ' ')
		f.buf = append(f.buf, tag...)
		f.buf = append(f.buf, ' ')
		f.buf = append(f.buf, line...)
		f.buf = append(f.buf, '\n')
		f.pend.advance(at)
		if len(f.buf) >= logBufferSize {
			if err := f.flushLocked(); err != nil {
				return err
			}
		}
		if len(rest) == 0 {
			break
		}
		content = rest
	}
	due := time.Since(f.recorded) > recordEvery
	if flush || due {
		if err := f.flushLocked(); err != nil {
			return err
		}
	}
	if due {
		f.saveRecordLocked()
	}
	return nil
}
