// Package runtimecgroups keeps Docker's daemons (dockerd, containerd) in the cgroup named by
// --runtime-cgroups, as upstream cri-dockerd does: checked at start and every few minutes,
// since a restarted dockerd starts wherever its parent put it.
package runtimecgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Interval is how often upstream checks (its container manager runs every 5 minutes).
const Interval = 5 * time.Minute

// Keeper moves Docker's daemons into one cgroup.
type Keeper struct {
	// Name is the cgroup, absolute from each hierarchy's root, e.g. /system.slice/docker.service.
	Name string
	// ProcRoot is /proc; PIDFile is dockerd's pid file (upstream reads /var/run/docker.pid).
	ProcRoot string
	PIDFile  string
	// Log gets a line per move and per failure.
	Log *logrus.Entry
}

// New is a Keeper for the host's /proc and Docker's default pid file.
func New(name string, log *logrus.Entry) *Keeper {
	return &Keeper{Name: name, ProcRoot: "/proc", PIDFile: "/var/run/docker.pid", Log: log}
}

// Run keeps the daemons in place until ctx ends.
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := k.Ensure(); err != nil {
			k.Log.Warnf("--runtime-cgroups %s: %v", k.Name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// Ensure moves every dockerd and containerd process of our PID namespace that is not in the
// cgroup yet. Processes in another PID namespace (a Docker in a container) are left alone, as
// upstream does; upstream compares with PID 1's namespace, which some nodes do not let even
// root read (an undumpable init), so we compare with our own.
func (k *Keeper) Ensure() error {
	mounts, err := cgroupMounts(filepath.Join(k.ProcRoot, "self", "mountinfo"))
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range k.daemonPIDs() {
		if !k.inOurPIDNamespace(pid) {
			continue
		}
		if err := k.move(pid, mounts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// daemonPIDs finds dockerd (its pid file, else by name) and every containerd.
func (k *Keeper) daemonPIDs() []int {
	byName := k.pidsByName("dockerd", "containerd")
	pids := byName["containerd"]
	if raw, err := os.ReadFile(k.PIDFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pid > 0 && k.comm(pid) == "dockerd" {
			return append([]int{pid}, pids...)
		}
	}
	return append(byName["dockerd"], pids...)
}

func (k *Keeper) pidsByName(names ...string) map[string][]int {
	out := map[string][]int{}
	entries, err := os.ReadDir(k.ProcRoot)
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm := k.comm(pid)
		for _, n := range names {
			if comm == n {
				out[n] = append(out[n], pid)
			}
		}
	}
	for _, n := range names {
		sort.Ints(out[n])
	}
	return out
}

func (k *Keeper) comm(pid int) string {
	raw, err := os.ReadFile(filepath.Join(k.ProcRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

func (k *Keeper) inOurPIDNamespace(pid int) bool {
	ours, err1 := os.Readlink(filepath.Join(k.ProcRoot, "self", "ns", "pid"))
	own, err2 := os.Readlink(filepath.Join(k.ProcRoot, strconv.Itoa(pid), "ns", "pid"))
	return err1 == nil && err2 == nil && ours == own
}

// move puts pid into the cgroup in each hierarchy it belongs to. The name=systemd hierarchy
// is systemd's: moving a unit's process there would hide it from its unit, so it is skipped.
func (k *Keeper) move(pid int, mounts []mount) error {
	memberships, err := readMemberships(filepath.Join(k.ProcRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	var errs []error
	for _, m := range memberships {
		if m.path == k.Name || strings.HasPrefix(m.controllers, "name=") {
			continue
		}
		mnt, ok := findMount(mounts, m.controllers)
		if !ok {
			continue
		}
		dir, err := ensureCgroup(mnt, k.Name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("move %s pid %d from %s to %s (%s): %w", k.comm(pid), pid, m.path, k.Name, mnt.point, err))
			continue
		}
		k.Log.WithFields(logrus.Fields{"pid": pid, "process": k.comm(pid), "from": m.path, "to": k.Name, "hierarchy": mnt.point}).Info("moved Docker's daemon into --runtime-cgroups")
	}
	return errors.Join(errs...)
}

// membership is one line of /proc/PID/cgroup: "ID:CONTROLLERS:PATH" ("0::PATH" on cgroup v2).
type membership struct{ controllers, path string }

func readMemberships(path string) ([]membership, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []membership
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		out = append(out, membership{controllers: parts[1], path: parts[2]})
	}
	return out, nil
}

// mount is a cgroup hierarchy's mount point; controllers is "" for cgroup v2.
type mount struct {
	point       string
	controllers map[string]bool
	v2          bool
}

// cgroupMounts reads the cgroup and cgroup2 mounts of a mountinfo file.
func cgroupMounts(mountinfo string) ([]mount, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			out = append(out, mount{point: fields[4], v2: true})
		case "cgroup":
			ctrls := map[string]bool{}
			for _, opt := range strings.Split(tail[2], ",") {
				ctrls[opt] = true
			}
			out = append(out, mount{point: fields[4], controllers: ctrls})
		}
	}
	return out, sc.Err()
}

// findMount finds the hierarchy of a /proc/PID/cgroup line's controllers ("" is cgroup v2).
func findMount(mounts []mount, controllers string) (mount, bool) {
	for _, m := range mounts {
		if controllers == "" {
			if m.v2 {
				return m, true
			}
			continue
		}
		if m.v2 {
			continue
		}
		all := true
		for _, c := range strings.Split(controllers, ",") {
			all = all && m.controllers[c]
		}
		if all {
			return m, true
		}
	}
	return mount{}, false
}

// ensureCgroup creates name under the hierarchy. A new cpuset cgroup takes no process until its
// cpus and mems are set: each new level copies its parent's.
func ensureCgroup(m mount, name string) (string, error) {
	dir := m.point
	for _, part := range strings.Split(strings.Trim(name, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return "", err
		}
		if m.controllers["cpuset"] {
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				value, err := os.ReadFile(filepath.Join(parent, file))
				if err != nil {
					return "", err
				}
				if err := os.WriteFile(filepath.Join(dir, file), value, 0o644); err != nil {
					return "", err
				}
			}
		}
	}
	return dir, nil
}
