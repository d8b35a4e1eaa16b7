package containerlog

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// Docker's followed log stream skips what it had not yet sent of a json-file it rotates
// (max-size): under a chatty container, Docker 20.10 and 29 alike lose hundreds of lines at
// each rotation, and 20.10 also sends runs of lines again. A plain read (not followed) reads
// every file Docker keeps, in order. So while a followed pass runs, the identity of Docker's
// own file is checked before each write: once Docker has rotated it, what the pass read since
// may follow a gap, and is dropped unwritten; the follower reads again from the last line in
// its file with a plain read, then follows anew. Where Docker's file cannot be seen (another
// driver, or Docker's root not visible to us), nothing is checked.

// errDockerRotated ends a followed pass after Docker rotated its own log file.
var errDockerRotated = errors.New("docker rotated its log file")

// fileIdentity tells one file from the one that replaces it at the same path.
type fileIdentity struct {
	dev, ino uint64
}

// identityOf is path's identity; false when it cannot be seen.
func identityOf(path string) (fileIdentity, bool) {
	if path == "" {
		return fileIdentity{}, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileIdentity{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileIdentity{}, false
	}
	return fileIdentity{dev: uint64(st.Dev), ino: st.Ino}, true
}

// rotationWatch is Docker's file as a followed pass began.
type rotationWatch struct {
	path  string
	id    fileIdentity
	known bool // the file was there when the pass began
	on    bool
}

// watchRotation starts watching Docker's file at path for this pass (follow), or stops.
func watchRotation(path string, follow bool) rotationWatch {
	if !follow || path == "" {
		return rotationWatch{}
	}
	id, ok := identityOf(path)
	return rotationWatch{path: path, id: id, known: ok, on: true}
}

// rotated reports whether Docker's file may not be the one the pass began with: another file
// is at its path; or none is while its directory is there (Docker renamed its file and has not
// made the next yet; a removed container's directory is gone); or one is and none was (the
// follower began before the container's first start), since what Docker did meanwhile is not
// known.
func (w rotationWatch) rotated() bool {
	if !w.on {
		return false
	}
	id, ok := identityOf(w.path)
	if !ok {
		_, err := os.Stat(filepath.Dir(w.path))
		return err == nil
	}
	return !w.known || id != w.id
}
