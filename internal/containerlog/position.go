package containerlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"
)

// position is where a follower stands in a container's log: it has written every message
// up to Time, and Count messages stamped exactly Time (Docker's stamps are nanoseconds, but two
// messages can share one).
type position struct {
	Time  time.Time `json:"time"`
	Count int       `json:"count"`
	// Done: the container stopped and its whole log is written.
	Done bool `json:"done"`
	// FileTime and FileCount are where the current file began, after a rotation: its lines
	// stamped FileTime come after FileCount lines of that stamp in the files before it (a
	// rotation can fall between the parts of a long line). Zero when the file began the log.
	FileTime  time.Time `json:"file_time,omitzero"`
	FileCount int       `json:"file_count,omitempty"`
}

// after reports whether p is further on than q.
func (p position) after(q position) bool {
	return p.Time.After(q.Time) || p.Time.Equal(q.Time) && p.Count > q.Count
}

// advance records one more message written, stamped at.
func (p *position) advance(at time.Time) {
	if at.Equal(p.Time) {
		p.Count++
		return
	}
	p.Time, p.Count = at, 1
}

// written reports whether a message stamped at is already in the log, given that seen
// messages with exactly p.Time have been offered so far in this pass.
func (p position) written(at time.Time, seen int) bool {
	return at.Before(p.Time) || at.Equal(p.Time) && seen < p.Count
}

// loadRecord reads a position record; a missing or damaged one is the start of the log.
func loadRecord(path string) position {
	data, err := os.ReadFile(path)
	if err != nil {
		return position{}
	}
	return decodeRecord(data)
}

// decodeRecord is the position a record's bytes hold; damaged bytes are the start of the log.
func decodeRecord(data []byte) position {
	var p position
	if json.Unmarshal(data, &p) != nil {
		return position{}
	}
	return p
}

// saveRecord writes a position record atomically: temp file, fsync, rename.
func saveRecord(path string, p position) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tailWindow is how much of a log file is read at a time, from its end, to find the last
// position: more than the longest CRI line we write (Docker splits messages at 16 KiB).
const tailWindow = 256 << 10

// maxLineRead bounds the bytes of one line filePosition holds: a file whose end has no newline
// for that long is not one we wrote.
const maxLineRead = 1 << 20

// filePosition reads the position of the last lines of a CRI log file: the time of the last
// complete line and how many lines at its end carry that same time, read back as far as they
// go. whole reports that every complete line of the file carries that time.
func filePosition(path string) (p position, whole bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return position{}, false, nil
	}
	if err != nil {
		return position{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return position{}, false, err
	}
	off := fi.Size()
	var pending []byte // the end of a line whose start is before off
	torn := true       // the bytes after the last newline are not a line yet
	for off > 0 {
		n := min(int64(tailWindow), off)
		off -= n
		buf := make([]byte, n, int(n)+len(pending))
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return position{}, false, err
		}
		buf = append(buf, pending...)
		pending = nil
		if torn {
			// Only complete lines count: a torn last line (a crash mid-write) is ignored.
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				if len(buf) > maxLineRead {
					return position{}, false, nil
				}
				pending = buf
				continue
			}
			buf, torn = buf[:i], false
		}
		for buf != nil {
			var line []byte
			if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
				line, buf = buf[i+1:], buf[:i]
			} else if off > 0 {
				if len(buf) > maxLineRead {
					return p, false, nil
				}
				pending = buf
				break
			} else {
				line, buf = buf, nil
			}
			stamp, _, ok := bytes.Cut(line, []byte(" "))
			if !ok {
				return p, false, nil
			}
			at, err := time.Parse(time.RFC3339Nano, string(stamp))
			if err != nil {
				return p, false, nil
			}
			switch {
			case p.Count == 0:
				p.Time, p.Count = at, 1
			case at.Equal(p.Time):
				p.Count++
			default:
				return p, false, nil
			}
		}
	}
	return p, p.Count > 0, nil
}
