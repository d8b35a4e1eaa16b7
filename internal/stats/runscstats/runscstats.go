// Package runscstats reads what only a gVisor sandbox knows about its container: how many
// tasks run in it.
//
// Docker's stats of a container on runsc (a daemon.json runtime behind containerd's runc shim)
// are its host cgroup's: pids.current there counts the threads of the sandbox's Sentry and
// gofer (about fifty for an idle container), not the container's processes, which are no host
// processes at all. containerd's own gVisor shim answers the CRI from `runsc events --stats`,
// whose pids are the sandbox's tasks; so do we. runsc finds the container through its state
// root, which the shim passes as `--root` to every runsc it starts, the sandbox process (the
// container's State.Pid) included: that is where the root is read from.
package runscstats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// defaultTimeout bounds one runsc events call (about 35 ms on an idle node).
const defaultTimeout = 5 * time.Second

// Reader runs runsc to read a sandbox's figures.
type Reader struct {
	// Proc is the host's procfs, where the sandbox process's command line is.
	Proc string
	// Timeout bounds one runsc call (default 5 s).
	Timeout time.Duration
	// Run runs a command and returns its standard output (exec.CommandContext when nil).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Tasks returns the number of tasks (threads included, as the pids cgroup counts them) of
// container id in its gVisor sandbox, whose sandbox process is sandboxPid, as runsc at
// runscPath reports it.
func (r Reader) Tasks(ctx context.Context, runscPath string, sandboxPid int, id string) (uint64, error) {
	if runscPath == "" || sandboxPid <= 0 || id == "" {
		return 0, errors.New("runsc events needs the runtime's path, the sandbox's PID and the container's ID")
	}
	root, err := r.stateRoot(sandboxPid)
	if err != nil {
		return 0, err
	}
	var args []string
	if root != "" {
		args = append(args, "--root="+root)
	}
	args = append(args, "events", "--stats", id)
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	run := r.Run
	if run == nil {
		run = runCommand
	}
	out, err := run(ctx, runscPath, args...)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", runscPath, strings.Join(args, " "), err)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Pids *struct {
				Current uint64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &ev); err != nil {
		return 0, fmt.Errorf("%s events: %w", runscPath, err)
	}
	if ev.Type != "stats" || ev.Data.Pids == nil {
		return 0, fmt.Errorf("%s events: no pids in %q", runscPath, brief(out))
	}
	return ev.Data.Pids.Current, nil
}

// stateRoot is the --root flag of the sandbox process's command line ("" when it has none:
// runsc's default root), read up to its subcommand (boot; gofer for the gofer process).
func (r Reader) stateRoot(pid int) (string, error) {
	proc := r.Proc
	if proc == "" {
		proc = "/proc"
	}
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return "", fmt.Errorf("the gVisor sandbox's command line: %w", err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "runsc") {
		return "", fmt.Errorf("process %d is not a gVisor sandbox (%q)", pid, brief([]byte(args[0])))
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "boot" || a == "gofer" {
			break // the subcommand: its flags are not runsc's global ones
		}
		if !strings.HasPrefix(a, "-") {
			continue // the value of a flag given as "--flag value"
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "root" {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return "", fmt.Errorf("process %d: --root without a value", pid)
			}
			value = args[i+1]
		}
		return value, nil
	}
	return "", nil
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := brief(stderr.Bytes()); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return out, nil
}

// brief is the first line of b, at most 200 bytes.
func brief(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
