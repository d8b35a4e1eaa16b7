package containerlog

import (
	"bytes"
	"io"
	"os"
	"syscall"
	"time"
)

// logFile is what a follower writes: an *os.File opened for appending.
type logFile interface {
	io.Writer
	Truncate(size int64) error
	Close() error
}

// openLogFile opens a CRI log file for appending and returns it with the end of its last
// whole line, cutting off what follows it: a line cut by a crash or a full filesystem, which
// resume does not count as written and which the next line would otherwise be joined to.
func openLogFile(path string) (logFile, int64, error) {
	// O_NOFOLLOW: a symbolic link put where the log goes does not lead our writes elsewhere.
	file, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return nil, 0, err
	}
	size, err := wholeLinesEnd(file)
	if err == nil {
		err = file.Truncate(size)
	}
	if err != nil {
		file.Close()
		return nil, 0, err
	}
	return file, size, nil
}

// wholeLinesEnd is the offset after the last newline of file. A file whose last tailWindow
// bytes hold no newline is not one we wrote: it is left as it is.
func wholeLinesEnd(file *os.File) (int64, error) {
	fi, err := file.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	n := min(size, tailWindow)
	buf := make([]byte, n)
	if _, err := file.ReadAt(buf, size-n); err != nil && err != io.EOF {
		return 0, err
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return size - n + int64(i) + 1, nil
	}
	if n == size {
		return 0, nil
	}
	return size, nil
}

// warnEvery bounds how often a follower warns that its file cannot be written: a full
// filesystem fails every retry.
const warnEvery = 15 * time.Second

// writeTrouble is what a follower tells of the writes to its file that failed.
type writeTrouble struct {
	since    time.Time // the first failure since the last good write; zero while writes succeed
	warned   time.Time
	failures int // failed writes since the last warning
	dropped  int // lines they dropped from the buffer
}

// failed notes a write that dropped lines from the buffer, and warns at most every warnEvery.
func (w *writeTrouble) failed(f *follower, err error, lines int) {
	now := time.Now()
	if w.since.IsZero() {
		w.since = now
	}
	w.failures++
	w.dropped += lines
	if now.Sub(w.warned) < warnEvery {
		return
	}
	f.logf("%v; %d lines not written in %d failed writes since the last warning (Docker keeps them: copied again from after %s once a write succeeds; failing since %s)",
		err, w.dropped, w.failures, f.pos.Time.UTC().Format(time.RFC3339Nano), w.since.UTC().Format(time.RFC3339))
	w.warned, w.failures, w.dropped = now, 0, 0
}

// recovered notes a good write after failures.
func (w *writeTrouble) recovered(f *follower) {
	if w.since.IsZero() {
		return
	}
	f.m.log.WithField("container", f.id).Infof("writing %s again, failing since %s", f.path, w.since.UTC().Format(time.RFC3339))
	w.since, w.failures, w.dropped = time.Time{}, 0, 0
}
