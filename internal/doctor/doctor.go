// Package doctor checks a node for what cri-dockerd needs: Docker and its runtimes (gVisor's
// network mode among them), the runtime handler aliases, the pod infra image, CNI, the CRI
// socket and OOM score limits. Each check is one line a node admin can act on.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
	"golang.org/x/sys/unix"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/core"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Status of a check.
type Status string

// A failed check makes the doctor exit non-zero; a warning does not. Info says what no node
// can change (what Docker cannot do).
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	Info Status = "info"
)

// Check is the result of one check.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Run performs every check with the given configuration.
func Run(ctx context.Context, docker libdocker.Client, cfg *config.Config) []Check {
	var checks []Check
	add := func(name string, st Status, format string, args ...any) {
		checks = append(checks, Check{Name: name, Status: st, Detail: fmt.Sprintf(format, args...)})
	}
	if err := cfg.Validate(); err != nil {
		add("config", Fail, "%s", strings.ReplaceAll(err.Error(), "\n  ", "; "))
	} else {
		add("config", OK, "flags and config file are valid")
	}

	v, err := docker.Version(ctx)
	if err != nil {
		add("docker", Fail, "Docker at %s does not answer: %v (is dockerd running? is --docker-endpoint right?)", cfg.DockerEndpoint, err)
		return append(checks, socketCheck(cfg))
	}
	api := docker.APIVersion()
	st := OK
	detail := fmt.Sprintf("Docker %s, API %s, at %s", v.Version, api, cfg.DockerEndpoint)
	if versions.LessThan(api, "1.41") {
		st, detail = Warn, detail+": older than Docker 20.10 (API 1.41), the oldest engine cri-dockerd is tested with"
	}
	add("docker", st, "%s", detail)

	info, err := docker.Info(ctx)
	if err != nil {
		add("docker info", Fail, "GET /info failed: %v", err)
		return append(checks, socketCheck(cfg))
	}
	add("cgroup driver", OK, "%s (cgroup v%s); the kubelet's cgroupDriver must be %s too", info.CgroupDriver, cgroupVersion(info), info.CgroupDriver)

	checks = append(checks, besideRuntimes(runtimeChecks(info), gvisorChecks(info, cfg.NetworkPlugin, hostGVisorProbes()))...)
	checks = append(checks, aliasChecks(info, api, cfg.RuntimeHandlerAliases)...)
	checks = append(checks, privilegedChecks(info, cfg)...)
	checks = append(checks, dockerLogCheck(info.LoggingDriver, daemonJSONPath, cfg))

	if _, err := docker.InspectImage(ctx, cfg.PodInfraContainerImage); err != nil {
		if libdocker.IsNotFound(err) {
			add("pod infra image", Warn, "%s is not present: the first pod pulls it (nodes without registry access must load it: docker load)", cfg.PodInfraContainerImage)
		} else {
			add("pod infra image", Fail, "%s: %v", cfg.PodInfraContainerImage, err)
		}
	} else {
		add("pod infra image", OK, "%s is present", cfg.PodInfraContainerImage)
	}

	if cfg.NetworkPlugin == "cni" {
		checks = append(checks, cniChecks(cfg.CNIConfDir, cfg.CNIBinDirs)...)
	} else {
		add("network", OK, "--network-plugin=%q: Docker's default bridge", cfg.NetworkPlugin)
	}
	checks = append(checks, socketCheck(cfg), nriCheck(cfg, "/proc"))
	if reason := core.NegativeOOMScoreRefusal(info); reason != "" {
		add("oom score", Warn, "%s: sandboxes and Guaranteed pods get oom_score_adj 0 instead of a negative value", reason)
	} else {
		add("oom score", OK, "negative oom_score_adj allowed (sandboxes get -998)")
	}
	return checks
}

func cgroupVersion(info system.Info) string {
	if info.CgroupVersion != "" {
		return info.CgroupVersion
	}
	return "1"
}

// shimType matches a containerd shim v2 runtime type, e.g. io.containerd.runsc.v1.
var shimType = regexp.MustCompile(`^io\.containerd\.([a-z0-9_-]+)\.(v[0-9]+)$`)

// runtimeVersionKey matches the version annotation of a runtime's features, e.g.
// org.opencontainers.runc.version (runc, crun and youki report one).
var runtimeVersionKey = regexp.MustCompile(`^org\.opencontainers\.([a-z0-9_-]+)\.version$`)

// runtimeChecks checks each runtime Docker knows: its binary must be there and executable —
// a runtime whose path is a directory fails every pod only at start, with a cryptic error.
//
// The binary is the one Docker runs, not one of cri-dockerd's PATH: an absolute path is
// checked as it is; a bare name ("runc", as Docker reports its own runtimes) is what dockerd
// finds in its own PATH, so what Docker says it ran (the OCI features Docker 25+ read from the
// binary, the default runtime's commit) is believed first, and cri-dockerd's PATH is only a
// fallback where Docker says nothing. A runtime defined by runtimeType (a containerd shim,
// Docker 23+) is reported by Docker with neither path nor type: it is a valid shim runtime whose
// binary containerd finds, which cannot be checked from here.
func runtimeChecks(info system.Info) []Check {
	names := make([]string, 0, len(info.Runtimes))
	for name := range info.Runtimes {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []Check
	for _, name := range names {
		check := runtimeCheck(name, info)
		if name == info.DefaultRuntime {
			check.Detail += " (Docker's default)"
		}
		out = append(out, check)
	}
	return out
}

func runtimeCheck(name string, info system.Info) Check {
	rt := info.Runtimes[name]
	check := Check{Name: "runtime " + name, Status: OK}
	ran := dockerRan(name, info)
	args := ""
	if len(rt.Args) > 0 {
		args = " " + strings.Join(rt.Args, " ")
	}
	fixIt := "fix its entry in /etc/docker/daemon.json and reload dockerd (kill -HUP)"
	switch {
	case rt.Path == "" && rt.Type == "":
		// Docker starts only with a path or a runtimeType for each runtime, and reports no type.
		check.Detail = "a containerd shim runtime (runtimeType in daemon.json, which Docker's /info does not report): containerd finds its shim binary, which is not checked here"
	case rt.Path == "":
		check.Status, check.Detail = shimCheck(rt.Type)
	case filepath.IsAbs(rt.Path):
		if problem, _ := binaryProblem(rt.Path); problem != "" {
			check.Status, check.Detail = Fail, problem+"; "+fixIt
			break
		}
		check.Detail = "checked " + rt.Path + args
		if ran != "" {
			check.Detail += " (" + ran + ")"
		}
	case ran != "":
		// A bare name: dockerd looked it up in its own PATH and ran what it found.
		check.Detail = fmt.Sprintf("%s%s from dockerd's PATH (%s); not looked up in cri-dockerd's PATH", rt.Path, args, ran)
	default:
		// A bare name Docker says nothing about: cri-dockerd's PATH is all there is to look in.
		problem, resolved := binaryProblem(rt.Path)
		if problem != "" {
			check.Status = Warn
			check.Detail = fmt.Sprintf("%s, and Docker does not report running %q; dockerd looks it up in its own PATH: make sure dockerd finds it there", problem, rt.Path)
			break
		}
		check.Detail = fmt.Sprintf("checked %s, %q in cri-dockerd's PATH%s (Docker does not report which binary its own PATH gives)", resolved, rt.Path, args)
	}
	return check
}

// dockerRan says what Docker reports about running a runtime's binary: its version from the
// OCI features Docker read from it, or for the default runtime the commit of its --version;
// "" when Docker reports nothing.
func dockerRan(name string, info system.Info) string {
	if raw := info.Runtimes[name].Status[core.OCIFeaturesKey]; raw != "" {
		var features struct {
			Annotations map[string]string `json:"annotations"`
		}
		_ = json.Unmarshal([]byte(raw), &features)
		keys := make([]string, 0, len(features.Annotations))
		for k := range features.Annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if m := runtimeVersionKey.FindStringSubmatch(k); m != nil && features.Annotations[k] != "" {
				v := "Docker ran " + m[1] + " " + features.Annotations[k]
				if commit := features.Annotations["org.opencontainers."+m[1]+".commit"]; commit != "" {
					v += ", commit " + commit
				}
				return v
			}
		}
		return "Docker read its OCI features"
	}
	if name == info.DefaultRuntime {
		if id := info.RuncCommit.ID; id != "" && id != "N/A" {
			return "Docker ran it: commit " + id
		}
	}
	return ""
}

// shimCheck checks a containerd shim runtime type, where a Docker reports one: a shim binary's
// path, or a shim name whose binary containerd-shim-NAME-vN containerd looks up in its PATH
// (cri-dockerd's may differ, so a miss there only warns).
func shimCheck(typ string) (Status, string) {
	if filepath.IsAbs(typ) {
		if problem, _ := binaryProblem(typ); problem != "" {
			return Fail, problem + "; fix its runtimeType in /etc/docker/daemon.json and reload dockerd (kill -HUP)"
		}
		return OK, "checked shim " + typ
	}
	m := shimType.FindStringSubmatch(typ)
	if m == nil {
		return Warn, fmt.Sprintf("runtime type %q is neither a containerd shim name (io.containerd.NAME.vN) nor a path", typ)
	}
	shim := "containerd-shim-" + m[1] + "-" + m[2]
	problem, resolved := binaryProblem(shim)
	if problem != "" {
		return Warn, fmt.Sprintf("shim %s: %s; containerd looks it up in its own PATH: make sure it finds it there", typ, problem)
	}
	return OK, fmt.Sprintf("shim %s: checked %s in cri-dockerd's PATH (containerd looks in its own)", typ, resolved)
}

// binaryProblem says what is wrong with an executable, or "" and its resolved path.
func binaryProblem(path string) (string, string) {
	if path == "" {
		return "", ""
	}
	resolved := path
	if !filepath.IsAbs(path) {
		found, err := exec.LookPath(path)
		if err != nil {
			return fmt.Sprintf("%s is not found in PATH", path), ""
		}
		resolved = found
	}
	fi, err := os.Stat(resolved)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%s does not exist", resolved), ""
	case err != nil:
		return fmt.Sprintf("%s: %v", resolved, err), ""
	case fi.IsDir():
		return fmt.Sprintf("%s is a directory, not an executable", resolved), ""
	case fi.Mode()&0o111 == 0:
		return fmt.Sprintf("%s is not executable", resolved), ""
	}
	return "", resolved
}

func aliasChecks(info system.Info, api string, aliases map[string]string) []Check {
	names := make([]string, 0, len(aliases))
	for name := range aliases {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []Check
	for _, name := range names {
		target := aliases[name]
		check := Check{Name: "handler " + name, Status: OK, Detail: fmt.Sprintf("-> Docker runtime %s", target)}
		_, known := info.Runtimes[target]
		switch {
		case known:
		case shimType.MatchString(target) && versions.GreaterThanOrEqualTo(api, "1.42"):
			check.Detail += " (a containerd shim Docker runs without configuration; its binary must be in dockerd's PATH)"
		default:
			check.Status = Fail
			check.Detail += `: Docker does not know it; add it to "runtimes" in /etc/docker/daemon.json and reload dockerd`
		}
		out = append(out, check)
	}
	return out
}

// privilegedChecks catches a --privileged-without-host-devices entry that names no handler
// this node serves (a typo would leave Docker's privileged mode, host devices and all).
func privilegedChecks(info system.Info, cfg *config.Config) []Check {
	var out []Check
	for _, name := range cfg.PrivilegedWithoutHostDevices {
		check := Check{Name: "privileged " + name, Status: OK, Detail: "privileged containers of this handler get no host devices"}
		_, aliased := cfg.RuntimeHandlerAliases[name]
		_, runtime := info.Runtimes[name]
		if !aliased && !runtime && name != cfg.DefaultRuntimeHandler {
			check.Status = Warn
			check.Detail = fmt.Sprintf("--privileged-without-host-devices names %q, which is neither a --runtime-handler alias, a Docker runtime nor %q (Docker's default): no pod can use it", name, cfg.DefaultRuntimeHandler)
		}
		out = append(out, check)
	}
	return out
}

// cniChecks finds the network configs and checks that every plugin they name is installed.
func cniChecks(confDir string, binDirs []string) []Check {
	var files []string
	for _, pattern := range []string{"*.conf", "*.conflist", "*.json"} {
		m, _ := filepath.Glob(filepath.Join(confDir, pattern))
		files = append(files, m...)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return []Check{{Name: "cni config", Status: Fail, Detail: fmt.Sprintf("no network config in %s: pods cannot get a network (install one, e.g. packaging/cni/)", confDir)}}
	}
	out := []Check{{Name: "cni config", Status: OK, Detail: fmt.Sprintf("%s (first of %d)", files[0], len(files))}}
	types, err := pluginTypes(files[0])
	if err != nil {
		return append(out, Check{Name: "cni plugins", Status: Fail, Detail: fmt.Sprintf("%s: %v", files[0], err)})
	}
	var missing []string
	for _, t := range types {
		found := false
		for _, dir := range binDirs {
			if problem, _ := binaryProblem(filepath.Join(dir, t)); problem == "" {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return append(out, Check{Name: "cni plugins", Status: Fail, Detail: fmt.Sprintf("%s not found in %s", strings.Join(missing, ", "), strings.Join(binDirs, ":"))})
	}
	return append(out, Check{Name: "cni plugins", Status: OK, Detail: fmt.Sprintf("%s in %s", strings.Join(types, ", "), strings.Join(binDirs, ":"))})
}

// pluginTypes reads the plugin types of a network config or config list.
func pluginTypes(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var conf struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	var types []string
	if conf.Type != "" {
		types = append(types, conf.Type)
	}
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	if len(types) == 0 {
		return nil, errors.New("names no plugin type")
	}
	return types, nil
}

// socketCheck looks at the CRI socket: the kubelet and crictl need it, nobody else should.
func socketCheck(cfg *config.Config) Check {
	check := Check{Name: "cri socket"}
	ep, err := config.ParseEndpoint(cfg.ContainerRuntimeEndpoint)
	switch {
	case err != nil:
		check.Status, check.Detail = Fail, err.Error()
		return check
	case ep.Activated:
		// systemd's socket unit owns the path (cri-docker.socket: /run/cri-dockerd.sock).
		ep.Path = "/run/cri-dockerd.sock"
	}
	path := ep.Path
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		check.Status, check.Detail = Warn, fmt.Sprintf("%s does not exist: cri-dockerd is not serving there", path)
		return check
	case err != nil:
		check.Status, check.Detail = Fail, err.Error()
		return check
	case fi.Mode()&os.ModeSocket == 0:
		check.Status, check.Detail = Fail, fmt.Sprintf("%s is not a socket", path)
		return check
	}
	mode := fi.Mode().Perm()
	group := "?"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		group = strconv.Itoa(int(st.Gid))
		if g, err := user.LookupGroupId(group); err == nil {
			group = g.Name
		}
	}
	check.Status, check.Detail = OK, fmt.Sprintf("%s mode %04o group %s", path, mode, group)
	if mode&0o007 != 0 {
		check.Status, check.Detail = Fail, check.Detail+": others may use it and so run containers as root; want mode 0660"
	}
	return check
}

// Print writes one line per check, or JSON.
func Print(w io.Writer, checks []Check, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(checks)
	}
	for _, c := range checks {
		if _, err := fmt.Fprintf(w, "%-4s  %-20s %s\n", c.Status, c.Name, c.Detail); err != nil {
			return err
		}
	}
	return nil
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// nriCheck says whether NRI can be hosted on --nri-socket: who serves the socket (the
// listener's process, by SO_PEERCRED), and how many plugins --nri-plugin-path holds.
func nriCheck(cfg *config.Config, proc string) Check {
	check := Check{Name: "nri"}
	if !cfg.NRI {
		check.Status, check.Detail = Info, "NRI off (--nri=false): NRI plugins get no events"
		return check
	}
	plugins := 0
	if entries, err := os.ReadDir(cfg.NRIPluginPath); err == nil {
		plugins = len(entries)
	}
	detail := fmt.Sprintf("%d plugin(s) in %s to start", plugins, cfg.NRIPluginPath)
	conn, err := net.DialTimeout("unix", cfg.NRISocket, time.Second)
	if err != nil {
		check.Status, check.Detail = OK, fmt.Sprintf("%s is free (cri-dockerd serves it once it runs); %s", cfg.NRISocket, detail)
		return check
	}
	defer conn.Close()
	server := "an unknown process"
	if uc, ok := conn.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					comm, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(int(cred.Pid)), "comm"))
					server = fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), cred.Pid)
				}
			})
		}
	}
	check.Status, check.Detail = OK, fmt.Sprintf("%s is served by %s; %s", cfg.NRISocket, server, detail)
	if !strings.HasPrefix(server, "cri-dockerd") {
		check.Status, check.Detail = Warn, check.Detail+": while another runtime holds the socket (containerd's NRI is on by default in containerd 2), cri-dockerd's NRI is off; disable containerd's NRI or give cri-dockerd another --nri-socket"
	}
	return check
}
