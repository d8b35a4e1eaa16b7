package containerlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
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

	mu       sync.Mutex // guards what follows: the writer and the reopen of the file
	file     *os.File
	w        *bufio.Writer
	pos      position
	recorded time.Time
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
		f.mu.Lock()
		f.flushLocked()
		f.mu.Unlock()
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
		if err != nil && !errors.Is(err, io.EOF) {
			f.logf("reading the log from Docker: %v", err)
		}
		if ierr == nil && c.State != nil && !c.State.Running && !c.State.Restarting {
			// Docker may end a followed stream before the message it writes at the container's
			// exit (the unterminated last line): one plain read from where we stand gets it.
			if err := f.copyStream(ctx, false); err != nil && !errors.Is(err, io.EOF) {
				f.logf("reading the end of the log from Docker: %v", err)
			}
			f.mu.Lock()
			f.flushLocked()
			f.pos.Done = true
			f.mu.Unlock()
			f.saveRecord()
			return
		}
		retryErr := ierr
		if ierr == nil {
			retryErr = err
		}
		select {
		case <-ctx.Done():
			f.saveRecord()
			return
		case <-f.m.retryAfter(retryErr):
		}
	}
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
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.file, f.w = file, nil // the buffer comes with the first write (write)
	f.mu.Unlock()
	return nil
}

func (f *follower) closeFile() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushLocked()
	if f.file != nil {
		f.file.Close()
		f.file, f.w = nil, nil
	}
}

func (f *follower) flushLocked() {
	if f.w != nil {
		if err := f.w.Flush(); err != nil {
			f.logf("write %s: %v", f.path, err)
		}
	}
}

// reopen switches to a new file at the same path, after the kubelet renamed the old one.
func (f *follower) reopen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return ErrNotFollowed
	}
	f.flushLocked()
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", f.path, err)
	}
	f.file.Close()
	f.file, f.w = file, nil
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
// stream ends when the container stops.
func (f *follower) copyStream(ctx context.Context, follow bool) error {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow, Timestamps: true}
	from := f.pos
	if !from.Time.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", from.Time.Unix(), from.Time.Nanosecond())
	}
	stream, err := f.m.docker.ContainerLogs(ctx, f.id, opts)
	if err != nil {
		return err
	}
	defer stream.Close()
	r := &messageReader{Reader: bufio.NewReaderSize(stream, streamBufferSize)}
	seen := 0 // lines of messages stamped exactly from.Time offered in this pass
	for {
		streamName, msg, err := f.next(r)
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
		if at.Equal(from.Time) {
			seen += criLines(content)
			if seen <= from.Count {
				continue
			}
		} else if at.Before(from.Time) {
			continue
		}
		f.write(at, streamName, content, r.Buffered() == 0)
	}
}

// logBufferSize is the write buffer of a followed log file: flushed at every message end that
// the stream pauses after, so a chatty container makes few writes.
const logBufferSize = 64 << 10

// streamBufferSize is the read buffer of a container's log stream from Docker. Each followed
// container holds one while it runs, quiet or not, so it is small: a message longer than it
// (Docker's line parts reach 16 KiB) is read straight into its own slice, and a terminal's
// line is gathered across fills.
const streamBufferSize = 4 << 10

// messageReader reads a log stream; rest is what a terminal's line held after its first
// message.
type messageReader struct {
	*bufio.Reader
	rest []byte
}

// next returns the next message of the stream and the name of the stream it came on.
func (f *follower) next(r *messageReader) (string, []byte, error) {
	if f.tty {
		// A terminal has one stream, not multiplexed: one message per line, but for a line of
		// 16 KiB or more, which Docker splits into parts that it sends back to back, each
		// after the same stamp ("T part1T part2T part3\n"): one message per part.
		line := r.rest
		if line == nil {
			var err error
			line, err = r.ReadBytes('\n')
			if err != nil && len(line) == 0 {
				return "", nil, err
			}
		}
		r.rest = nil
		if stamp, _, ok := bytes.Cut(line, []byte(" ")); ok {
			sep := line[:len(stamp)+1]
			if i := bytes.Index(line[len(sep):], sep); i >= 0 {
				line, r.rest = line[:len(sep)+i], line[len(sep)+i:]
			}
		}
		return "stdout", line, nil
	}
	var header [8]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return "", nil, err
	}
	payload := make([]byte, binary.BigEndian.Uint32(header[4:]))
	if _, err := io.ReadFull(r, payload); err != nil {
		return "", nil, err
	}
	name := "stdout"
	if header[0] == 2 {
		name = "stderr"
	}
	return name, payload, nil
}

// criLines is how many CRI lines write makes of a message: one per line of it.
func criLines(content []byte) int {
	return bytes.Count(bytes.TrimSuffix(content, []byte("\n")), []byte("\n")) + 1
}

// write appends a message as CRI lines. A message without a trailing newline is part of a
// longer line (Docker splits lines at 16 KiB) or output not ended yet: tag P; a whole line: tag
// F. A message holding newlines inside (Docker sends one line per message, but a log stream
// is not ours to trust) becomes one F line per line, so that no text makes a line of its own
// that is not in the CRI format; the position counts lines, as filePosition does.
func (f *follower) write(at time.Time, stream string, content []byte, flush bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w == nil {
		if f.file == nil {
			return // not open
		}
		// Allocated on the first write, not at open: a node's many quiet containers (pause
		// containers have no log at all) hold no 64 KiB buffer each.
		f.w = bufio.NewWriterSize(f.file, logBufferSize)
	}
	stamp := at.UTC().Format(time.RFC3339Nano)
	for {
		tag, line, rest := "P", content, []byte(nil)
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			tag, line, rest = "F", content[:i], content[i+1:]
		}
		f.w.WriteString(stamp)
		f.w.WriteByte(' ')
		f.w.WriteString(stream)
		f.w.WriteByte(' ')
		f.w.WriteString(tag)
		f.w.WriteByte(' ')
		f.w.Write(line)
		f.w.WriteByte('\n')
		f.pos.advance(at)
		if len(rest) == 0 {
			break
		}
		content = rest
	}
	if flush {
		f.flushLocked()
	}
	if time.Since(f.recorded) > recordEvery {
		f.flushLocked()
		f.saveRecordLocked()
	}
}
