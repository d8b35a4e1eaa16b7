package execkill

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// sandbox is the fake Docker of a sandboxed runtime: exec'd processes are no host processes, a
// host kill (KillExec) only counts, and the killer script (when the image has a shell) kills
// the execs whose environment holds its argument, as the script does inside gVisor.
type sandbox struct {
	*libdocker.Fake
	noShell bool

	mu        sync.Mutex
	env       map[string][]string // exec ID -> its Env
	killers   map[string][]string // exec ID of a killer -> its command
	killerArg []string            // arguments of the killer execs
	hostKills int
}

func (d *sandbox) CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error) {
	execID, err := d.Fake.CreateExec(ctx, id, opts)
	if err == nil {
		d.mu.Lock()
		d.env[execID] = opts.Env
		if isKiller(opts.Cmd) {
			d.killerArg = append(d.killerArg, opts.Cmd[4])
			d.killers[execID] = opts.Cmd
		}
		d.mu.Unlock()
	}
	return execID, err
}

func (d *sandbox) AttachExec(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	d.mu.Lock()
	cmd, killer := d.killers[execID]
	var targets []string
	if killer && !d.noShell {
		for id, env := range d.env {
			for _, e := range env {
				if e == cmd[4] {
					targets = append(targets, id)
				}
			}
		}
	}
	d.mu.Unlock()
	for _, id := range targets {
		if err := d.Fake.KillExec(ctx, id); err != nil {
			return types.HijackedResponse{}, err
		}
	}
	return d.Fake.AttachExec(ctx, execID, opts)
}

func (d *sandbox) KillExec(ctx context.Context, execID string) error {
	d.mu.Lock()
	d.hostKills++
	d.mu.Unlock()
	return d.Fake.KillExec(ctx, execID)
}

func isKiller(cmd []string) bool {
	return len(cmd) == 5 && cmd[0] == "sh" && cmd[2] == killScript
}

// procFixture writes a procfs with process pid at the given NSpid levels and mount namespace,
// and our own mount namespace "mnt:[1]".
func procFixture(t *testing.T, dir string, pid, levels int, mnt string) {
	t.Helper()
	p := filepath.Join(dir, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(p, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	nspid := []string{strconv.Itoa(pid)}
	for i := 1; i < levels; i++ {
		nspid = append(nspid, strconv.Itoa(i))
	}
	status := "Name:\tx\nPid:\t" + strconv.Itoa(pid) + "\nNSpid:\t" + strings.Join(nspid, "\t") + "\n"
	if err := os.WriteFile(filepath.Join(p, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	if mnt != "" {
		if err := os.Symlink(mnt, filepath.Join(p, "ns", "mnt")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "self", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink("mnt:[1]", filepath.Join(dir, "self", "ns", "mnt"))
}

// runningContainer starts a container on d whose execs of "sleep" run for a minute.
func runningContainer(t *testing.T, d *sandbox) *container.InspectResponse {
	t.Helper()
	ctx := context.Background()
	d.AddImage(libdocker.FakeImage("", "", "busybox:latest"))
	d.SetExecHandler(func(_ string, cmd []string) libdocker.ExecResult {
		if cmd[0] == "sleep" {
			return libdocker.ExecResult{Delay: time.Minute}
		}
		if d.noShell {
			return libdocker.ExecResult{Stderr: "exec: \"sh\": executable file not found in $PATH", ExitCode: 127}
		}
		return libdocker.ExecResult{}
	})
	id := testutil.RunningContainer(t, d, "ctr", &container.Config{Image: "busybox:latest"}, &container.HostConfig{})
	c, err := d.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startSleep execs sleep in c with mark and returns the exec's ID once it runs.
func startSleep(t *testing.T, d *sandbox, c *container.InspectResponse, mark string) string {
	t.Helper()
	opts := container.ExecOptions{Cmd: []string{"sleep", "60"}, AttachStdout: true}
	if mark != "" {
		opts.Env = []string{mark}
	}
	execID, err := d.CreateExec(context.Background(), c.ID, opts)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := d.AttachExec(context.Background(), execID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stream.Close)
	return execID
}

func newSandbox() *sandbox {
	return &sandbox{Fake: libdocker.NewFake(), env: map[string][]string{}, killers: map[string][]string{}}
}

func TestMarkOnlyContainersWhoseInitIsNoProcessOfItsOwnPIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels int // 0: no such process in the procfs
		marked bool
	}{
		{"runc: init in a PID namespace of its own", 2, false},
		{"gVisor: the sandbox process is in the host's PID namespace", 1, true},
		{"the procfs does not show the container's init", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			if tc.levels > 0 {
				procFixture(t, proc, 4242, tc.levels, "mnt:[2]")
			}
			c := &container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: &container.State{Running: true, Pid: 4242}}}
			mark := Killer{Proc: proc}.Mark(c)
			if tc.marked != (mark != "") {
				t.Fatalf("mark %q, want marked=%v", mark, tc.marked)
			}
			if tc.marked && !regexp.MustCompile(`^CRI_DOCKERD_EXEC=[0-9a-f]{32}$`).MatchString(mark) {
				t.Errorf("mark %q", mark)
			}
			if tc.marked && mark == (Killer{Proc: proc}).Mark(c) {
				t.Error("two execs got the same mark")
			}
		})
	}
	if mark := (Killer{Proc: t.TempDir()}).Mark(&container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{}}); mark != "" {
		t.Errorf("a container without state got mark %q", mark)
	}
}

func TestKillInsideTheContainerNeverSignalsTheHostPID(t *testing.T) {
	d := newSandbox()
	c := runningContainer(t, d)
	proc := t.TempDir()
	procFixture(t, proc, c.State.Pid, 1, "mnt:[2]") // runsc-sandbox: host PID namespace, a mount namespace of its own
	k := Killer{Docker: d, Proc: proc}
	mark := k.Mark(c)
	if mark == "" {
		t.Fatal("no mark for a sandboxed container")
	}
	other := startSleep(t, d, c, k.Mark(c)) // another exec, not timed out
	execID := startSleep(t, d, c, mark)
	// The exec's host PID (runsc exec) is in our mount namespace, not the container's.
	inspect, _ := d.InspectExec(context.Background(), execID)
	procFixture(t, proc, inspect.Pid, 1, "mnt:[1]")

	if err := k.Kill(context.Background(), c, execID, mark); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got, _ := d.InspectExec(context.Background(), execID); got.Running || got.ExitCode != 137 {
		t.Errorf("exec running=%v exit %d after Kill, want killed (137)", got.Running, got.ExitCode)
	}
	if got, _ := d.InspectExec(context.Background(), other); !got.Running {
		t.Error("Kill also killed another exec of the container")
	}
	if d.hostKills != 0 {
		t.Errorf("%d host kills of a PID that is not the process", d.hostKills)
	}
	if len(d.killerArg) != 1 || d.killerArg[0] != mark {
		t.Errorf("killer arguments %q, want the mark %q once", d.killerArg, mark)
	}
	for id := range d.killers {
		if env := d.env[id]; len(env) != 0 {
			t.Errorf("the killer exec carries an environment %q: it would kill itself", env)
		}
	}
}

func TestKillOnTheHostWhenTheExecPIDIsAProcessOfTheContainer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels int
		marked bool
	}{
		{"runc", 2, false},
		{"runc with the host's PID namespace (marked, harmlessly)", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newSandbox()
			c := runningContainer(t, d)
			proc := t.TempDir()
			procFixture(t, proc, c.State.Pid, tc.levels, "mnt:[2]")
			k := Killer{Docker: d, Proc: proc}
			mark := k.Mark(c)
			if tc.marked != (mark != "") {
				t.Fatalf("mark %q", mark)
			}
			execID := startSleep(t, d, c, mark)
			inspect, _ := d.InspectExec(context.Background(), execID)
			procFixture(t, proc, inspect.Pid, tc.levels, "mnt:[2]") // joined the container's mount namespace
			if err := k.Kill(context.Background(), c, execID, mark); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if d.hostKills != 1 || len(d.killerArg) != 0 {
				t.Errorf("%d host kills and %d kills inside, want the host kill alone", d.hostKills, len(d.killerArg))
			}
			if got, _ := d.InspectExec(context.Background(), execID); got.Running {
				t.Error("exec still running")
			}
		})
	}
}

func TestKillRefusesAnUnmarkedHostPIDOutsideTheContainer(t *testing.T) {
	// A shim that reports a PID from inside a VM: the host process of that number is another's.
	d := newSandbox()
	c := runningContainer(t, d)
	proc := t.TempDir()
	procFixture(t, proc, c.State.Pid, 2, "mnt:[2]")
	k := Killer{Docker: d, Proc: proc}
	execID := startSleep(t, d, c, "")
	inspect, _ := d.InspectExec(context.Background(), execID)
	procFixture(t, proc, inspect.Pid, 1, "mnt:[1]")
	err := k.Kill(context.Background(), c, execID, "")
	if err == nil || !strings.Contains(err.Error(), "not in the container's mount namespace") {
		t.Fatalf("Kill: %v, want a refusal", err)
	}
	if d.hostKills != 0 {
		t.Error("killed a host process that is not the exec's")
	}
}

func TestKillWithoutAShellInTheImageSaysTheProcessStillRuns(t *testing.T) {
	d := newSandbox()
	d.noShell = true
	c := runningContainer(t, d)
	proc := t.TempDir()
	procFixture(t, proc, c.State.Pid, 1, "mnt:[2]")
	k := Killer{Docker: d, Proc: proc}
	mark := k.Mark(c)
	execID := startSleep(t, d, c, mark)
	start := time.Now()
	err := k.Kill(context.Background(), c, execID, mark)
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Kill waited %s for a process that a failed killer cannot have killed", elapsed)
	}
	if err == nil || !strings.Contains(err.Error(), "still runs inside the container") || !strings.Contains(err.Error(), "executable file not found") {
		t.Fatalf("Kill: %v, want the process reported running with the killer's output", err)
	}
	if d.hostKills != 0 {
		t.Error("fell back to a host kill")
	}
}

func TestKillOfAnEndedExecDoesNothing(t *testing.T) {
	d := newSandbox()
	c := runningContainer(t, d)
	execID, err := d.CreateExec(context.Background(), c.ID, container.ExecOptions{Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := d.AttachExec(context.Background(), execID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_, _ = io.Copy(io.Discard, stream.Reader)
	testutil.Eventually(t, 5*time.Second, time.Millisecond, func() bool {
		got, _ := d.InspectExec(context.Background(), execID)
		return !got.Running
	}, "exec of true never ended")
	if err := (Killer{Docker: d, Proc: t.TempDir()}).Kill(context.Background(), c, execID, "CRI_DOCKERD_EXEC=00"); err != nil {
		t.Fatal(err)
	}
	if d.hostKills != 0 || len(d.killerArg) != 0 {
		t.Error("killed an ended exec")
	}
}
