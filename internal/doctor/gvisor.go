package doctor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/system"
	"golang.org/x/sys/unix"
)

// gVisor's network modes, as a Docker runtime (runsc's --network flag):
//
//   - sandbox (the default): gVisor's own network stack, fed with the interfaces and routes it
//     copies from the container's network namespace when the sandbox starts. A CNI ADD, which
//     cri-dockerd runs after the pause container started, is never seen: CNI pods have no
//     network. runsc releases without the fix of gVisor issue 10704 (July 2024) take
//     /proc/sys/net/core/rmem_default for a sign of the host's namespace, and newer kernels
//     (Linux 6.x) have it in every network namespace: every start fails with "cannot run with
//     network enabled in root network namespace".
//   - host: the sandbox uses the network namespace it starts in, so the CNI ADD is seen.
//   - none: loopback only.

// gvisorFixDate is when gVisor issue 10704 was filed: runsc releases dated before it mistake
// every network namespace for the host's on kernels that namespace net.core.rmem_default.
const gvisorFixDate = "20240730"

// gvisorProbes are what the gVisor check asks of the node itself; tests replace them.
type gvisorProbes struct {
	// version is the first line of `BINARY --version`, "" when it cannot be run.
	version func(path string) string
	// rmemDefaultInNewNetns reports whether /proc/sys/net/core/rmem_default exists in a new
	// network namespace (it does on Linux 6.x), which runsc's old root-namespace test reads.
	rmemDefaultInNewNetns func() (bool, error)
}

func hostGVisorProbes() gvisorProbes {
	return gvisorProbes{version: binaryVersion, rmemDefaultInNewNetns: rmemDefaultInNewNetns}
}

func binaryVersion(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// rmemDefaultInNewNetns looks at /proc/sys/net/core/rmem_default from a thread of its own in a
// new, empty network namespace (needs CAP_SYS_ADMIN). The thread is never given back to the Go
// scheduler: it ends with its goroutine, and the namespace with it.
func rmemDefaultInNewNetns() (bool, error) {
	type result struct {
		exists bool
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("unshare a network namespace: %w", err)}
			return
		}
		// /proc/sys/net shows the namespace of the thread that looks.
		err := unix.Access("/proc/sys/net/core/rmem_default", unix.F_OK)
		switch {
		case err == nil:
			ch <- result{exists: true}
		case errors.Is(err, unix.ENOENT):
			ch <- result{}
		default:
			ch <- result{err: err}
		}
	}()
	r := <-ch
	return r.exists, r.err
}

// gvisorChecks warns about every runsc runtime Docker reports without --network=host or
// --network=none: one line with what goes wrong on this node and the fix.
func gvisorChecks(info system.Info, networkPlugin string, probe gvisorProbes) []Check {
	names := make([]string, 0, len(info.Runtimes))
	for name, rt := range info.Runtimes {
		if strings.HasPrefix(filepath.Base(rt.Path), "runsc") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Check
	kernelChecked := false
	var rmemEverywhere bool
	var rmemErr error
	for _, name := range names {
		rt := info.Runtimes[name]
		mode := runscNetwork(rt.Args)
		if mode == "host" || mode == "none" {
			continue
		}
		var problems []string
		if !kernelChecked {
			rmemEverywhere, rmemErr = probe.rmemDefaultInNewNetns()
			kernelChecked = true
		}
		if rmemEverywhere || rmemErr != nil {
			version := probe.version(rt.Path)
			date := releaseDate.FindString(version)
			switch {
			case date != "" && date >= gvisorFixDate:
				// A release that may have the fix: nothing known against it.
			case date != "" && rmemEverywhere:
				problems = append(problems, fmt.Sprintf(`%s fails every pod on this kernel ("cannot run with network enabled in root network namespace": it takes net.core.rmem_default, which this kernel has in every network namespace, for a sign of the host's; gVisor issue 10704)`, version))
			case rmemEverywhere:
				problems = append(problems, `unless this runsc has the fix of gVisor issue 10704 (2024), it fails every pod on this kernel ("cannot run with network enabled in root network namespace"), which has net.core.rmem_default in every network namespace`)
			case date != "":
				problems = append(problems, fmt.Sprintf(`%s fails every pod on kernels that have net.core.rmem_default in every network namespace (Linux 6.x; gVisor issue 10704), which could not be checked here (%v)`, version, rmemErr))
			}
		}
		if networkPlugin == "cni" {
			problems = append(problems, "with --network-plugin=cni gVisor copies the pod's interfaces when the sandbox starts, before the CNI ADD: its pods would have no network")
		}
		if len(problems) == 0 {
			continue
		}
		out = append(out, Check{
			Name:   "runtime " + name + " network",
			Status: Warn,
			Detail: fmt.Sprintf(`%s: %s; add "runtimeArgs": ["--network=host"] (or "--network=none") to its entry in /etc/docker/daemon.json and reload dockerd (kill -HUP)`, modeWords(mode), strings.Join(problems, "; ")),
		})
	}
	return out
}

// besideRuntimes puts each "runtime NAME network" check right after the "runtime NAME" check.
func besideRuntimes(runtimes, network []Check) []Check {
	out := make([]Check, 0, len(runtimes)+len(network))
	for _, c := range runtimes {
		out = append(out, c)
		for _, n := range network {
			if n.Name == c.Name+" network" {
				out = append(out, n)
			}
		}
	}
	return out
}

// releaseDate is the date in a runsc version: "runsc version release-20240807.0", Debian's
// "runsc version 0.0~20221219.0".
var releaseDate = regexp.MustCompile(`20[0-9]{6}`)

// runscNetwork is the --network a runsc command line sets (Go flags: one or two dashes, the
// value after = or as the next argument; the last one wins), "" for the default (sandbox).
func runscNetwork(args []string) string {
	mode := ""
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "network" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		mode = value
	}
	return mode
}

func modeWords(mode string) string {
	if mode == "" {
		return "runsc with gVisor's default --network=sandbox"
	}
	return "runsc with --network=" + mode
}
