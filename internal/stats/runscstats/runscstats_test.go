package runscstats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture writes a procfs with process pid's command line.
func fixture(t *testing.T, pid string, args ...string) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc
}

// recorder is a Run that answers out and records the command it was given.
func recorder(out string, err error, got *[]string) func(context.Context, string, ...string) ([]byte, error) {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		*got = append([]string{name}, args...)
		return []byte(out), err
	}
}

const stats = `{"type":"stats","id":"c1","data":{"cpu":{"usage":{"total":105111098}},"memory":{"usage":{"usage":3362816}},"pids":{"current":2}}}` + "\n"

// The tasks are runsc's pids, read with the root the shim gave the sandbox process.
func TestTasksAreRunscsPidsUnderTheSandboxsRoot(t *testing.T) {
	for name, args := range map[string][]string{
		"--root=X":  {"runsc-sandbox", "--root=/run/docker/runtime-runc/moby", "--log=/x/log.json", "--network=host", "boot", "--bundle=/b", "c1"},
		"--root X":  {"/usr/bin/runsc", "--log", "/x/log.json", "--root", "/run/docker/runtime-runc/moby", "boot", "c1"},
		"-root=X":   {"runsc", "-root=/run/docker/runtime-runc/moby", "boot", "--root=/not/this", "c1"},
		"gofer too": {"runsc-gofer", "--root=/run/docker/runtime-runc/moby", "gofer", "--bundle", "/b"},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			r := Reader{Proc: fixture(t, "42", args...), Run: recorder(stats, nil, &got)}
			n, err := r.Tasks(context.Background(), "/usr/bin/runsc", 42, "c1")
			if err != nil || n != 2 {
				t.Fatalf("Tasks = %d, %v; want 2", n, err)
			}
			want := []string{"/usr/bin/runsc", "--root=/run/docker/runtime-runc/moby", "events", "--stats", "c1"}
			if !slices.Equal(got, want) {
				t.Errorf("ran %q, want %q", got, want)
			}
		})
	}
}

// A sandbox started without --root is on runsc's default root: no --root is passed.
func TestTasksWithoutARootUseRunscsDefault(t *testing.T) {
	var got []string
	r := Reader{Proc: fixture(t, "7", "runsc-sandbox", "--network=none", "boot", "c1"), Run: recorder(stats, nil, &got)}
	if n, err := r.Tasks(context.Background(), "runsc", 7, "c1"); err != nil || n != 2 {
		t.Fatalf("Tasks = %d, %v", n, err)
	}
	if want := []string{"runsc", "events", "--stats", "c1"}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
}

// Every failure is an error that says what failed, and no count: a wrong count would reach
// the kubelet's eviction ranking.
func TestTasksFailuresAreErrors(t *testing.T) {
	sandbox := []string{"runsc-sandbox", "--root=/r", "boot", "c1"}
	for name, tc := range map[string]struct {
		args    []string
		pid     int
		out     string
		runErr  error
		path    string
		wantErr string
	}{
		"no path":              {args: sandbox, pid: 42, path: "", wantErr: "needs the runtime's path"},
		"no pid":               {args: sandbox, pid: 0, path: "runsc", wantErr: "needs the runtime's path"},
		"process gone":         {args: sandbox, pid: 43, path: "runsc", wantErr: "command line"},
		"not a sandbox":        {args: []string{"/pause"}, pid: 42, path: "runsc", wantErr: "not a gVisor sandbox"},
		"--root without value": {args: []string{"runsc", "--root"}, pid: 42, path: "runsc", wantErr: "--root without a value"},
		"runsc fails":          {args: sandbox, pid: 42, path: "runsc", runErr: errors.New("exit status 128: loading sandbox: file does not exist"), wantErr: "loading sandbox"},
		"not JSON":             {args: sandbox, pid: 42, path: "runsc", out: "usage: runsc events", wantErr: "runsc events:"},
		"no pids":              {args: sandbox, pid: 42, path: "runsc", out: `{"type":"stats","data":{"cpu":{}}}`, wantErr: "no pids"},
		"another event":        {args: sandbox, pid: 42, path: "runsc", out: `{"type":"oom","data":{"pids":{"current":3}}}`, wantErr: "no pids"},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			r := Reader{Proc: fixture(t, "42", tc.args...), Run: recorder(tc.out, tc.runErr, &got)}
			n, err := r.Tasks(context.Background(), tc.path, tc.pid, "c1")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || n != 0 {
				t.Errorf("Tasks = %d, %v; want an error with %q", n, err, tc.wantErr)
			}
		})
	}
}

// The real runner passes runsc's stderr on in its error, and is bounded by the timeout.
func TestRunCommandSaysWhatTheCommandSaid(t *testing.T) {
	_, err := runCommand(context.Background(), "sh", "-c", "echo loading sandbox: file does not exist >&2; exit 128")
	if err == nil || !strings.Contains(err.Error(), "loading sandbox: file does not exist") {
		t.Errorf("runCommand = %v, want the command's stderr", err)
	}
	out, err := runCommand(context.Background(), "sh", "-c", "echo '{}'")
	if err != nil || strings.TrimSpace(string(out)) != "{}" {
		t.Errorf("runCommand = %q, %v", out, err)
	}
}

// Each runsc call is bounded: by Timeout, or by 5 s when it is not set.
func TestTasksCallsAreBounded(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{0: defaultTimeout, 2 * time.Second: 2 * time.Second} {
		var left time.Duration
		r := Reader{Proc: fixture(t, "42", "runsc-sandbox", "boot", "c1"), Timeout: timeout, Run: func(ctx context.Context, _ string, _ ...string) ([]byte, error) {
			if d, ok := ctx.Deadline(); ok {
				left = time.Until(d)
			}
			return []byte(stats), nil
		}}
		if _, err := r.Tasks(context.Background(), "runsc", 42, "c1"); err != nil {
			t.Fatal(err)
		}
		if left <= want-time.Second || left > want {
			t.Errorf("Timeout %v: the call had %v left, want about %v", timeout, left, want)
		}
	}
}

// A sandbox command line with neither --root nor a subcommand (runsc's own default root).
func TestStateRootOfAnArgumentListWithoutSubcommand(t *testing.T) {
	r := Reader{Proc: fixture(t, "42", "runsc", "--network=host", "--debug")}
	if root, err := r.stateRoot(42); err != nil || root != "" {
		t.Errorf("stateRoot = %q, %v; want the default root", root, err)
	}
}
