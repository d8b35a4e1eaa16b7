// Package unifiedcgroup writes cgroup v2 files into a running container's cgroup: the part of
// the CRI's unified map that Docker's API cannot carry (memory.oom.group, memory.high,
// memory.min, memory.swap.max without a memory limit, ...). runc writes the unified map into
// the cgroup before the container's process runs; Docker gives us no such step, so these are
// written right after Docker has started the container, and again on each update.
package unifiedcgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Setting is one cgroup v2 interface file of a container and the value written to it.
type Setting struct{ File, Value string }

// Check refuses what must not be written into a container's cgroup: a name that is not a
// controller's interface file ("<controller>.<name>": a lower-case controller, then letters,
// digits, '_' and '.' as in hugetlb.2MB.max; no '/', so it always names a file in the cgroup's
// own directory), the core "cgroup.*" files
// (they move processes and hand controllers down, which is not a container's resource), and a
// value with a newline or NUL (one write is one setting).
func Check(file, value string) error {
	ctrl, rest, ok := strings.Cut(file, ".")
	if !ok || ctrl == "" || rest == "" || strings.HasSuffix(rest, ".") || strings.Contains(file, "..") {
		return fmt.Errorf("cgroup v2 file %q: want <controller>.<name>, as in memory.high", file)
	}
	for i, r := range file {
		upper := r >= 'A' && r <= 'Z' && i > len(ctrl)
		if !(r >= 'a' && r <= 'z' || upper || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return fmt.Errorf("cgroup v2 file %q: want a lower-case controller, then only letters, digits, '_' and '.'", file)
		}
	}
	if ctrl == "cgroup" {
		return fmt.Errorf("cgroup v2 file %q: the cgroup core files are not a container's resources", file)
	}
	if strings.ContainsAny(value, "\n\x00") {
		return fmt.Errorf("cgroup v2 %s=%q: the value must be one line", file, value)
	}
	return nil
}

// Host is where the node's cgroup v2 hierarchy and procfs are mounted: /sys/fs/cgroup and
// /proc on a node, fixture directories in tests.
type Host struct{ Cgroups, Proc string }

// V2 reports whether Cgroups is the root of the unified hierarchy (a cgroup v2 node).
func (h Host) V2() bool {
	st, err := os.Stat(filepath.Join(h.Cgroups, "cgroup.controllers"))
	return err == nil && st.Mode().IsRegular()
}

// ErrGone says that the process has ended: its container no longer runs.
var ErrGone = errors.New("the process has ended")

// Dir is the cgroup v2 directory of process pid, from the "0::PATH" line of /proc/PID/cgroup.
// The path is cleaned under Cgroups: whatever a process's cgroup says, Dir stays below it.
func (h Host) Dir(pid int) (string, error) {
	raw, err := os.ReadFile(filepath.Join(h.Proc, strconv.Itoa(pid), "cgroup"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", ErrGone
	}
	if err != nil {
		return "", err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if path, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return filepath.Join(h.Cgroups, filepath.Clean("/"+string(path))), nil
		}
	}
	return "", fmt.Errorf("process %d is in no cgroup v2 (its /proc/%d/cgroup has no 0:: line)", pid, pid)
}

// Write writes each setting, in order, into dir. A file is never created: a name the kernel
// does not offer there (a controller not enabled for the cgroup, or no such file) fails with
// the cgroup's controllers named.
func Write(dir string, settings []Setting) error {
	for _, s := range settings {
		if err := Check(s.File, s.Value); err != nil {
			return err
		}
		path := filepath.Join(dir, s.File)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if errors.Is(err, fs.ErrNotExist) {
			ctrls, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
			return fmt.Errorf("cgroup v2 %s=%s: %s has no such file (its controllers: %q)", s.File, s.Value, dir, strings.TrimSpace(string(ctrls)))
		}
		if err != nil {
			return fmt.Errorf("cgroup v2 %s=%s: %w", s.File, s.Value, err)
		}
		_, err = f.WriteString(s.Value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cgroup v2 %s=%s: write %s: %w", s.File, s.Value, path, err)
		}
	}
	return nil
}
