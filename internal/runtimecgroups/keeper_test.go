package runtimecgroups

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// fakeHost lays out a /proc and cgroup v1 hierarchies (cpu,cpuacct; cpuset; name=systemd) in
// a temporary directory.
type fakeHost struct {
	t        *testing.T
	proc, cg string
	keeper   *Keeper
}

func newFakeHost(t *testing.T) *fakeHost {
	dir := t.TempDir()
	h := &fakeHost{t: t, proc: filepath.Join(dir, "proc"), cg: filepath.Join(dir, "cgroup")}
	for _, hier := range []string{"cpu,cpuacct", "cpuset", "systemd"} {
		must(t, os.MkdirAll(filepath.Join(h.cg, hier), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(h.cg, "cpuset", "cpuset.cpus"), []byte("0-1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(h.cg, "cpuset", "cpuset.mems"), []byte("0\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(h.proc, "self"), 0o755))
	info := "" +
		"25 1 0:22 / /sys rw - sysfs sysfs rw\n" +
		"30 25 0:26 / " + filepath.Join(h.cg, "cpu,cpuacct") + " rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct\n" +
		"31 25 0:27 / " + filepath.Join(h.cg, "cpuset") + " rw,nosuid - cgroup cgroup rw,cpuset\n" +
		"32 25 0:28 / " + filepath.Join(h.cg, "systemd") + " rw,nosuid - cgroup cgroup rw,xattr,name=systemd\n" +
		"33 25 0:29 /docker " + filepath.Join(dir, "nested") + " rw - cgroup cgroup rw,memory\n"
	must(t, os.WriteFile(filepath.Join(h.proc, "self", "mountinfo"), []byte(info), 0o644))
	must(t, os.MkdirAll(filepath.Join(h.proc, "self", "ns"), 0o755))
	must(t, os.Symlink("pid:[host]", filepath.Join(h.proc, "self", "ns", "pid")))
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	h.keeper = &Keeper{Name: "/system.slice/docker.service", ProcRoot: h.proc, PIDFile: filepath.Join(dir, "docker.pid"), Log: logrus.NewEntry(logger)}
	return h
}

func (h *fakeHost) process(pid int, comm, pidns, cgroup string) {
	d := filepath.Join(h.proc, itoa(pid))
	must(h.t, os.MkdirAll(filepath.Join(d, "ns"), 0o755))
	must(h.t, os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644))
	must(h.t, os.Symlink("pid:["+pidns+"]", filepath.Join(d, "ns", "pid")))
	lines := "4:cpu,cpuacct:" + cgroup + "\n3:cpuset:" + cgroup + "\n1:name=systemd:/system.slice/ssh.service\n"
	must(h.t, os.WriteFile(filepath.Join(d, "cgroup"), []byte(lines), 0o644))
}

func (h *fakeHost) procsIn(hier string) string {
	raw, _ := os.ReadFile(filepath.Join(h.cg, hier, "system.slice", "docker.service", "cgroup.procs"))
	return string(raw)
}

func TestDockerDaemonsMoveIntoTheCgroup(t *testing.T) {
	h := newFakeHost(t)
	h.process(100, "dockerd", "host", "/")
	h.process(200, "containerd", "host", "/")
	h.process(300, "containerd", "other", "/") // a Docker inside a container: left alone
	h.process(400, "sshd", "host", "/")
	must(t, os.WriteFile(h.keeper.PIDFile, []byte("100\n"), 0o644))

	if err := h.keeper.Ensure(); err != nil {
		t.Fatal(err)
	}
	// Each write replaces the fake's cgroup.procs file: the last pid moved is containerd's.
	if got := h.procsIn("cpu,cpuacct"); got != "200" {
		t.Errorf("cpu,cpuacct cgroup.procs = %q, want containerd's pid 200 written last", got)
	}
	if got, _ := os.ReadFile(filepath.Join(h.cg, "cpuset", "system.slice", "cpuset.cpus")); string(got) != "0-1\n" {
		t.Errorf("new cpuset cgroup has cpus %q, want its parent's", got)
	}
	if got := h.procsIn("cpuset"); got != "200" {
		t.Errorf("cpuset cgroup.procs = %q", got)
	}
	if _, err := os.Stat(filepath.Join(h.cg, "systemd", "system.slice", "docker.service")); err == nil {
		t.Error("the name=systemd hierarchy was touched; it is systemd's")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(h.cg), "nested", "system.slice")); err == nil {
		t.Error("a mount of a non-root cgroup was used as a hierarchy")
	}
}

func TestDaemonsAlreadyThereAreNotMoved(t *testing.T) {
	h := newFakeHost(t)
	h.process(100, "dockerd", "host", "/system.slice/docker.service")
	if err := h.keeper.Ensure(); err != nil {
		t.Fatal(err)
	}
	if got := h.procsIn("cpu,cpuacct"); got != "" {
		t.Errorf("cgroup.procs written (%q) for a daemon already in the cgroup", got)
	}
}

func TestStalePIDFileFallsBackToTheProcessName(t *testing.T) {
	h := newFakeHost(t)
	h.process(100, "dockerd", "host", "/")
	must(t, os.WriteFile(h.keeper.PIDFile, []byte("4242\n"), 0o644))
	if got := h.keeper.daemonPIDs(); len(got) != 1 || got[0] != 100 {
		t.Errorf("daemon pids %v, want [100]", got)
	}
}

func TestFailuresNameThePIDAndTheCgroup(t *testing.T) {
	h := newFakeHost(t)
	h.process(100, "dockerd", "host", "/")
	must(t, os.Remove(filepath.Join(h.cg, "cpuset", "cpuset.mems")))
	err := h.keeper.Ensure()
	if err == nil || !strings.Contains(err.Error(), "dockerd pid 100") || !strings.Contains(err.Error(), "/system.slice/docker.service") {
		t.Errorf("Ensure = %v, want a failure naming dockerd pid 100 and the cgroup", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
