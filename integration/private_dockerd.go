//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// PrivateDockerd is a dockerd of a test's own, for what must not happen to the shared engine
// (restarting it, a kubelet that kills unknown pods). Same recipe as test/e2e/run.sh:
// its own data root, exec root (and so its own managed containerd, started by dockerd from
// Debian's docker.io), pid file, socket and containerd namespaces; a bridge of its own, no iptables,
// no NAT, so it changes nothing else on the host's network: pods on it use the host network
// (hostNetworkPod). It gets the runtimes of /etc/docker/daemon.json and the images a test asks
// for, copied from the shared engine (saved once per test binary run). Its cleanup always
// kills it and whatever its containerd left running, unmounts and removes its directory.
type PrivateDockerd struct {
	t       testing.TB
	Dir     string // everything it writes is under here
	Host    string // unix://…/docker.sock, for cri-dockerd's --docker-endpoint
	LogPath string
	Client  *client.Client // API version negotiation on, like cri-dockerd's

	opts    PrivateDockerdOptions
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	bridge  string // its own bridge interface (see privateBridge)
}

// PrivateDockerdOptions are the settings a test may change on its private dockerd.
type PrivateDockerdOptions struct {
	// LiveRestore is daemon.json's "live-restore": containers keep running while dockerd is
	// stopped, and dockerd takes them back when it starts again.
	LiveRestore bool
	// Docker29 runs the Docker 29 engine that hack/docker29.sh built (its dockerd,
	// which starts the containerd and runc built with it) instead of Debian's 20.10, with the
	// runtimes and cgroup driver of that script's engine.
	Docker29 bool
	// ClampOOMScoreAdj makes its default runtime a runc that sets a negative oom_score_adj to 0:
	// this VM lacks CAP_SYS_RESOURCE, and upstream cri-dockerd's sandboxes ask for -998
	// (ours clamps it itself), so that benchmarks can run upstream on it.
	ClampOOMScoreAdj bool
}

// privateBridge creates a bridge interface on a free 10.254.N.0/24 for a private dockerd and
// removes it when the test ends.
func privateBridge(t testing.TB) string {
	t.Helper()
	name := "crid-pd" + randHex()[:6]
	used, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	for n := 1; n < 255; n++ {
		prefix := fmt.Sprintf("10.254.%d.", n)
		if strings.Contains(string(used), " "+prefix) {
			continue
		}
		for _, args := range [][]string{
			{"link", "add", name, "type", "bridge"},
			{"addr", "add", prefix + "1/24", "dev", name},
			{"link", "set", name, "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				exec.Command("ip", "link", "del", name).Run()
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		t.Cleanup(func() { exec.Command("ip", "link", "del", name).Run() })
		return name
	}
	t.Fatal("no free 10.254.N.0/24 for a private dockerd's bridge")
	return ""
}

const (
	// privateContainerdNamespace is where its containers are in its containerd.
	privateContainerdNamespace = "crid-it-pd"
	privateDockerdStartTimeout = 60 * time.Second
	privateDockerdStopTimeout  = 30 * time.Second
)

// StartPrivateDockerd starts a private dockerd, waits until it answers and loads images (from
// the shared engine) into it.
func StartPrivateDockerd(t testing.TB, images ...string) *PrivateDockerd {
	t.Helper()
	return StartPrivateDockerdWith(t, PrivateDockerdOptions{}, images...)
}

// StartPrivateDockerdWith is StartPrivateDockerd with options.
func StartPrivateDockerdWith(t testing.TB, opts PrivateDockerdOptions, images ...string) *PrivateDockerd {
	t.Helper()
	// Short: the socket of its containerd lives under the exec root (108-byte limit).
	dir, err := os.MkdirTemp("", "crid-pd-")
	if err != nil {
		t.Fatal(err)
	}
	p := &PrivateDockerd{t: t, Dir: dir, Host: "unix://" + filepath.Join(dir, "docker.sock"), LogPath: filepath.Join(dir, "dockerd.log"), opts: opts}
	// Before p.cleanup, so that it is removed after dockerd stopped.
	p.bridge = privateBridge(t)
	t.Cleanup(p.cleanup)
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), privateDaemonJSON(t, opts), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Client, err = client.NewClientWithOpts(client.WithHost(p.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	if len(images) > 0 {
		start := time.Now()
		tar := savedImages(t, images)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := p.Client.ImageLoad(ctx, bytes.NewReader(tar), client.ImageLoadWithQuiet(true))
		if err != nil {
			t.Fatalf("private dockerd: load %v: %v", images, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || bytes.Contains(out, []byte(`"error"`)) {
			t.Fatalf("private dockerd: load %v: %v %s", images, err, out)
		}
		t.Logf("private dockerd: loaded %d images in %v", len(images), time.Since(start).Round(time.Millisecond))
	}
	return p
}

// privateDaemonJSON is the runtimes and exec-opts of the daemon.json hack/docker.sh wrote
// for the engine it runs (/etc/docker/daemon.json, or Docker 29's) and the options' settings,
// nothing else.
func privateDaemonJSON(t testing.TB, opts PrivateDockerdOptions) []byte {
	var cfg struct {
		Runtimes       map[string]json.RawMessage `json:"runtimes,omitempty"`
		DefaultRuntime string                     `json:"default-runtime,omitempty"`
		LiveRestore    bool                       `json:"live-restore,omitempty"`
		ExecOpts       []string                   `json:"exec-opts,omitempty"`
	}
	shared := "/etc/docker/daemon.json"
	if opts.Docker29 {
		shared = docker29Config
	}
	if b, err := os.ReadFile(shared); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", shared, err)
		}
	}
	cfg.LiveRestore = opts.LiveRestore
	if opts.ClampOOMScoreAdj {
		if cfg.Runtimes == nil {
			cfg.Runtimes = map[string]json.RawMessage{}
		}
		path, _ := json.Marshal(map[string]string{"path": oomClampRunc(t)})
		cfg.Runtimes["oom-clamp"] = path
		cfg.DefaultRuntime = "oom-clamp"
	}
	b, _ := json.Marshal(cfg)
	return b
}

// oomClampRunc writes the runtime of ClampOOMScoreAdj: runc, after rewriting a negative
// oomScoreAdj in the bundle's config.json (Docker writes it compact) to 0.
func oomClampRunc(t testing.TB) string {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc: %v", err)
	}
	path := filepath.Join(os.TempDir(), "crid-it-oom-clamp-runc")
	script := "#!/bin/sh\n# runc with a negative oomScoreAdj set to 0 (cri-dockerd integration tests)\n" +
		"prev=\nfor a in \"$@\"; do\n" +
		"  [ \"$prev\" = --bundle ] && sed -i 's/\"oomScoreAdj\":-[0-9]*/\"oomScoreAdj\":0/' \"$a/config.json\"\n" +
		"  prev=$a\ndone\nexec " + runc + " \"$@\"\n"
	if b, err := os.ReadFile(path); err != nil || string(b) != script {
		if err := os.WriteFile(path+".tmp", []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

var imageCache struct {
	sync.Mutex
	tars map[string][]byte
}

// savedImages is `docker save` of images from the shared engine, made once per test binary run.
func savedImages(t testing.TB, images []string) []byte {
	t.Helper()
	key := strings.Join(images, " ")
	imageCache.Lock()
	defer imageCache.Unlock()
	if b, ok := imageCache.tars[key]; ok {
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := suite.docker.ImageSave(ctx, images)
	if err != nil {
		t.Fatalf("docker save %v (shared engine): %v", images, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("docker save %v (shared engine): %v", images, err)
	}
	if imageCache.tars == nil {
		imageCache.tars = map[string][]byte{}
	}
	imageCache.tars[key] = b
	return b
}

// What hack/docker29.sh leaves for the private Docker 29 engines: the directory
// of its binaries (in a file) and its engine's daemon.json.
const (
	docker29BinFile = "/run/cri-dockerd-docker29/bin"
	docker29Config  = "/run/cri-dockerd-docker29/daemon.json"
)

func docker29Bin() (string, error) {
	b, err := os.ReadFile(docker29BinFile)
	bin := strings.TrimSpace(string(b))
	if err == nil {
		_, err = os.Stat(filepath.Join(bin, "dockerd"))
	}
	if err != nil {
		return "", fmt.Errorf("Docker 29's binaries: %v (run hack/docker29.sh)", err)
	}
	return bin, nil
}

// Running reports whether the dockerd process is alive.
func (p *PrivateDockerd) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Start starts dockerd (again, on the same directories) and waits until it answers /_ping.
func (p *PrivateDockerd) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *PrivateDockerd) start() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{
		"--config-file", filepath.Join(p.Dir, "daemon.json"),
		"--host", p.Host,
		"--data-root", filepath.Join(p.Dir, "data"),
		"--exec-root", filepath.Join(p.Dir, "x"),
		"--pidfile", filepath.Join(p.Dir, "docker.pid"),
		// A bridge of its own: with --bridge none, dockerd deletes the host's docker0, which
		// the shared engine needs.
		"--bridge", p.bridge, "--iptables=false", "--ip-masq=false",
		"--containerd-namespace", privateContainerdNamespace, "--containerd-plugins-namespace", "crid-it-pd-plugins",
	}
	dockerd := "dockerd"
	var env []string
	if p.opts.Docker29 {
		bin, err := docker29Bin()
		if err != nil {
			return err
		}
		dockerd = filepath.Join(bin, "dockerd")
		// Its containerd, runc, shim and docker-proxy come from PATH: the ones built with it.
		env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		args = append(args, "--ip6tables=false", "--ip-forward=false")
	}
	fmt.Fprintf(logFile, "=== %s %s\n", dockerd, strings.Join(args, " "))
	p.cmd = exec.Command(dockerd, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Should the test binary die without its cleanups (a -timeout panic), dockerd gets SIGTERM
	// and stops its containers. The parent-death signal is tied to the thread that forked: that
	// thread stays locked to the goroutine that waits for the process.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p.done = make(chan struct{})
	started := make(chan error, 1)
	go func(cmd *exec.Cmd, done chan struct{}) {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			close(done)
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(done)
	}(p.cmd, p.done)
	if err := <-started; err != nil {
		return fmt.Errorf("start dockerd: %v (Debian's docker.io provides it: %s)", err, setupHint)
	}

	var exited bool
	if testutil.PollUntil(privateDockerdStartTimeout, 20*time.Millisecond, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = p.Client.Ping(ctx)
		cancel()
		return err == nil
	}) {
		if exited {
			return fmt.Errorf("private dockerd exited before serving (%v); log:\n%s", p.waitErr, p.tailLog())
		}
		return nil
	}
	return fmt.Errorf("private dockerd did not answer on %s within %v (%v); log:\n%s", p.Host, privateDockerdStartTimeout, err, p.tailLog())
}

// Stop sends SIGTERM and waits (bounded) for dockerd to exit. Without live-restore dockerd
// stops every container first (SIGTERM, then SIGKILL after the container's stop timeout); with
// it, they keep running.
func (p *PrivateDockerd) Stop() {
	p.t.Helper()
	if err := p.stop(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *PrivateDockerd) stop() error {
	if !p.Running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("private dockerd: SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(testutil.Scaled(privateDockerdStopTimeout)):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("private dockerd did not exit within %v of SIGTERM (killed); log:\n%s", privateDockerdStopTimeout, p.tailLog())
	}
	if p.waitErr != nil {
		return fmt.Errorf("private dockerd exited with %v after SIGTERM; log:\n%s", p.waitErr, p.tailLog())
	}
	return nil
}

// Restart stops dockerd cleanly and starts it again on the same directories.
func (p *PrivateDockerd) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

// cleanup runs whatever happened: dockerd is stopped (killed if it does not exit), then every
// process still running from its directory (its containerd, shims) and their descendants (the
// containers) are killed, its mounts are undone and the directory is removed. When the test
// left dockerd stopped with containers still running under their shims (live-restore), dockerd
// is started again first, so that it removes them with their cgroups and mounts.
func (p *PrivateDockerd) cleanup() {
	if p.Client != nil && !p.Running() && p.cmd != nil && len(processesUnder(p.Dir)) > 0 {
		if err := p.start(); err != nil {
			p.t.Logf("cleanup: start dockerd again to remove its containers: %v", err)
		}
	}
	if p.Client != nil && p.Running() {
		// Containers first, so that no shim outlives dockerd.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if ids, err := p.containerIDs(ctx); err == nil {
			for _, id := range ids {
				_ = p.Client.ContainerRemove(ctx, id, containerRemoveForce)
			}
		}
		cancel()
	}
	if err := p.stop(); err != nil {
		p.t.Errorf("cleanup: %v", err)
	}
	if p.Client != nil {
		_ = p.Client.Close()
	}
	for _, pid := range withDescendants(processesUnder(p.Dir)) {
		p.t.Logf("cleanup: killing process %d left by the private dockerd", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountUnder(p.t, p.Dir)
	if p.t.Failed() {
		p.t.Logf("private dockerd log (%s):\n%s", p.LogPath, p.tailLog())
	}
	if err := os.RemoveAll(p.Dir); err != nil {
		p.t.Errorf("cleanup: remove %s: %v", p.Dir, err)
	}
}

func (p *PrivateDockerd) tailLog() string {
	b, _ := os.ReadFile(p.LogPath)
	const max = 8000
	if len(b) > max {
		b = append([]byte("…"), b[len(b)-max:]...)
	}
	return string(b)
}

// processesUnder lists the processes whose command line names dir (containerd's
// --config/--address, the shims' -address and their bundles), deepest first.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			pids = append(pids, pid)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(pids)))
	return pids
}

// withDescendants adds to pids every process descending from one of them (a shim's container
// processes: the shim is their subreaper), deepest first.
func withDescendants(pids []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	var walk func(pid int, depth int)
	depthOf := map[int]int{}
	walk = func(pid, depth int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		depthOf[pid] = depth
		for _, c := range children[pid] {
			walk(c, depth+1)
		}
	}
	for _, pid := range pids {
		walk(pid, 0)
	}
	sort.SliceStable(out, func(i, j int) bool { return depthOf[out[i]] > depthOf[out[j]] })
	return out
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(t testing.TB, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("cleanup: unmount %s: %v", m, err)
		}
	}
}

var containerRemoveForce = container.RemoveOptions{Force: true, RemoveVolumes: true}

func (p *PrivateDockerd) containerIDs(ctx context.Context) ([]string, error) {
	list, err := p.Client.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// hostNetworkPod makes a pod use the host's network: the private dockerd has no bridge.
func hostNetworkPod(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	return cfg
}
