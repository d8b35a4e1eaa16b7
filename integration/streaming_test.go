//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/httpstream"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// The streaming tests drive cri-dockerd's exec, attach and port-forward URLs with client-go's
// SPDY and websocket clients, as kubectl (through the kubelet) does.

// stPod runs a pod with one busybox container running script and returns both IDs.
func stPod(t testing.TB, d *Daemon, prefix, script string, edit func(*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig)) (podID, ctrID string) {
	t.Helper()
	podCfg := newPodConfig(t, prefix)
	ctrCfg := containerConfig("app", script)
	if edit != nil {
		edit(podCfg, ctrCfg)
	}
	podID = runPod(t, d, podCfg, "")
	ctrID = createContainer(t, d, podID, podCfg, ctrCfg)
	startContainer(t, d, ctrID)
	return podID, ctrID
}

// stExecURL asks cri-dockerd for an exec URL and checks that it is absolute.
func stExecURL(t testing.TB, d *Daemon, req *runtimeapi.ExecRequest) *url.URL {
	t.Helper()
	resp, err := d.Runtime.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("Exec(%v): %v", req.Cmd, err)
	}
	return stParseURL(t, resp.Url)
}

func stParseURL(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		t.Fatalf("streaming URL %q is not absolute http://host:port/... (%v)", raw, err)
	}
	return u
}

// stSPDY runs a remotecommand session over SPDY, as kubectl exec/attach do.
func stSPDY(ctx context.Context, u *url.URL, opts remotecommand.StreamOptions) error {
	exec, err := remotecommand.NewSPDYExecutor(&restclient.Config{}, "POST", u)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

// stWebSocket runs a remotecommand session over websocket with the v4 channel protocol, the
// newest cri-streaming serves (v5 is translated to SPDY by the API server, not by runtimes).
func stWebSocket(ctx context.Context, u *url.URL, opts remotecommand.StreamOptions) error {
	exec, err := remotecommand.NewWebSocketExecutorForProtocols(&restclient.Config{}, "GET", u.String(), "v4.channel.k8s.io")
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

// stExitCode is the exit code a client sees in a session's error, or -1.
func stExitCode(err error) int {
	var exitErr interface{ ExitStatus() int }
	if errors.As(err, &exitErr) {
		return exitErr.ExitStatus()
	}
	return -1
}

func TestStreamingServerListensOnLoopbackByDefault(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-loopback", sleeper, nil)
	u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"true"}, Stdout: true})
	host, port, _ := net.SplitHostPort(u.Host)
	if host != "127.0.0.1" || port == "0" || port == "" {
		t.Errorf("exec URL %s: want http://127.0.0.1:<a real port>/...", u)
	}
	// What the process really listens on, from the kernel: every TCP listener it owns.
	listeners := stListeners(t, d.cmd.Process.Pid)
	if len(listeners) == 0 {
		t.Fatalf("cri-dockerd has no TCP listener")
	}
	for _, l := range listeners {
		if !l.IP.IsLoopback() {
			t.Errorf("cri-dockerd listens on %s: want loopback only by default", l)
		}
	}
	if want := net.JoinHostPort("127.0.0.1", port); !stContains(listeners, want) {
		t.Errorf("URL port %s is not a listener of cri-dockerd (%v)", port, listeners)
	}
}

func stContains(addrs []*net.TCPAddr, want string) bool {
	for _, a := range addrs {
		if a.String() == want {
			return true
		}
	}
	return false
}

// stListeners reads the TCP sockets in LISTEN state that process pid holds, via its fds'
// socket inodes and /proc/net/tcp{,6}.
func stListeners(t testing.TB, pid int) []*net.TCPAddr {
	t.Helper()
	inodes := map[string]bool{}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []*net.TCPAddr
	for _, file := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			out = append(out, stParseProcAddr(t, f[1]))
		}
	}
	return out
}

// stParseProcAddr parses /proc/net/tcp's HEXIP:HEXPORT (the IP in host byte order, per 32 bits).
func stParseProcAddr(t testing.TB, s string) *net.TCPAddr {
	hexIP, hexPort, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(hexPort, 16, 16)
	raw := make([]byte, len(hexIP)/2)
	for i := range raw {
		v, _ := strconv.ParseUint(hexIP[2*i:2*i+2], 16, 8)
		raw[i] = byte(v)
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		for i := 0; i < 4; i++ {
			ip[w+i] = raw[w+3-i]
		}
	}
	return &net.TCPAddr{IP: ip, Port: int(port)}
}

func TestExecStdoutStderrAndExitCodes(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-exec", sleeper, nil)
	for _, proto := range []struct {
		name   string
		stream func(context.Context, *url.URL, remotecommand.StreamOptions) error
	}{{"spdy", stSPDY}, {"websocket", stWebSocket}} {
		for _, tc := range []struct {
			script         string
			stdout, stderr string
			code           int
		}{
			{"echo out; echo err >&2", "out\n", "err\n", 0},
			{"echo out; echo err >&2; exit 7", "out\n", "err\n", 7},
			{"exit 1", "", "", 1},
		} {
			t.Run(proto.name+"/"+tc.script, func(t *testing.T) {
				u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", tc.script}, Stdout: true, Stderr: true})
				var stdout, stderr bytes.Buffer
				err := proto.stream(t.Context(), u, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
				switch {
				case tc.code == 0 && err != nil:
					t.Errorf("session: %v, want success", err)
				case tc.code != 0 && stExitCode(err) != tc.code:
					t.Errorf("session error %v (exit code %d), want exit code %d", err, stExitCode(err), tc.code)
				}
				if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
					t.Errorf("stdout %q stderr %q, want %q and %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
				}
			})
		}
	}
}

func TestExecStdinIsPipedThrough(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-stdin", sleeper, nil)
	u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", "wc -l; echo done"}, Stdin: true, Stdout: true})
	var stdout bytes.Buffer
	input := strings.Repeat("a line of input\n", 1000)
	if err := stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdin: strings.NewReader(input), Stdout: &stdout}); err != nil {
		t.Fatalf("session: %v", err)
	}
	// The end of stdin reached the process as EOF, or wc would never have finished.
	if got := strings.Fields(stdout.String()); len(got) != 2 || got[0] != "1000" || got[1] != "done" {
		t.Errorf("stdout %q, want 1000 lines counted and done", stdout.String())
	}
}

// stSizes is a TerminalSizeQueue fed by the test.
type stSizes chan remotecommand.TerminalSize

func (q stSizes) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// stSyncBuffer is a buffer that the session writes while the test reads.
type stSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *stSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *stSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// stTTYResize drives a `stty size` loop on a terminal session: it sends each size and presses
// enter until the program reports it, then quits with q.
func stTTYResize(t *testing.T, run func(remotecommand.StreamOptions) error) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	sizes := make(stSizes, 1)
	var out stSyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(remotecommand.StreamOptions{Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
	}()
	for _, size := range []remotecommand.TerminalSize{{Width: 100, Height: 30}, {Width: 211, Height: 57}} {
		sizes <- size
		want := fmt.Sprintf("%d %d", size.Height, size.Width)
		if !testutil.PollUntil(20*time.Second, 100*time.Millisecond, func() bool {
			if strings.Contains(out.String(), want) {
				return true
			}
			select {
			case err := <-done:
				t.Fatalf("session ended early (%v); output %q", err, out.String())
			default:
			}
			_, _ = stdinW.Write([]byte("\n"))
			return false
		}) {
			t.Fatalf("terminal never reported size %q; output so far %q", want, out.String())
		}
	}
	_, _ = stdinW.Write([]byte("q\n"))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("session: %v", err)
		}
	case <-time.After(testutil.Scaled(20 * time.Second)):
		t.Errorf("session did not end after q; output %q", out.String())
	}
	close(sizes)
	stdinW.Close()
}

// stSizeLoop prints the terminal size on each line of input and exits 0 on "q".
const stSizeLoop = `while read l; do [ "$l" = q ] && exit 0; stty size; done`

func TestExecTTYWithResize(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-tty", sleeper, nil)
	u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", stSizeLoop}, Stdin: true, Stdout: true, Tty: true})
	stTTYResize(t, func(opts remotecommand.StreamOptions) error { return stSPDY(t.Context(), u, opts) })
}

func TestAttachToRunningContainer(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-attach", "read line; echo got $line; read line2; echo bye >&2", func(_ *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig) {
		c.Stdin, c.StdinOnce = true, true
	})
	resp, err := d.Runtime.Attach(t.Context(), &runtimeapi.AttachRequest{ContainerId: ctrID, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	u := stParseURL(t, resp.Url)
	stdinR, stdinW := io.Pipe()
	var stdout, stderr stSyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Stderr: &stderr})
	}()
	_, _ = stdinW.Write([]byte("hello\n"))
	testutil.PollUntil(20*time.Second, 20*time.Millisecond, func() bool { return strings.Contains(stdout.String(), "got hello") })
	_, _ = stdinW.Write([]byte("second\n"))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("attach session: %v", err)
		}
	case <-time.After(testutil.Scaled(20 * time.Second)):
		t.Fatalf("attach did not end when the container exited")
	}
	stdinW.Close()
	if stdout.String() != "got hello\n" || stderr.String() != "bye\n" {
		t.Errorf("stdout %q stderr %q, want \"got hello\\n\" and \"bye\\n\"", stdout.String(), stderr.String())
	}
}

func TestAttachTTYWithResize(t *testing.T) {
	d := StartDaemon(t)
	_, ctrID := stPod(t, d, "st-attach-tty", stSizeLoop, func(_ *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig) {
		c.Stdin, c.Tty = true, true
	})
	resp, err := d.Runtime.Attach(t.Context(), &runtimeapi.AttachRequest{ContainerId: ctrID, Stdin: true, Stdout: true, Tty: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	u := stParseURL(t, resp.Url)
	stTTYResize(t, func(opts remotecommand.StreamOptions) error { return stSPDY(t.Context(), u, opts) })
}

// stHTTPD serves /www/index.html ("hello from NAME") on addr inside the pod.
func stHTTPD(name, addr string) string {
	return fmt.Sprintf("mkdir -p /www && echo hello from %s > /www/index.html && exec httpd -f -p %s -h /www", name, addr)
}

// stForward runs client-go's port forwarder (kubectl port-forward) to a pod port and returns
// the local port.
func stForward(t *testing.T, d *Daemon, podID string, port int) int {
	t.Helper()
	resp, err := d.Runtime.PortForward(t.Context(), &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{int32(port)}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	u := stParseURL(t, resp.Url)
	transport, upgrader, err := spdy.RoundTripperFor(&restclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan error, 1)
	go func() { forwarded <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-forwarded })
	select {
	case <-ready:
	case err := <-forwarded:
		t.Fatalf("port forwarder: %v", err)
	case <-time.After(testutil.Scaled(20 * time.Second)):
		t.Fatal("port forwarder not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v: %v", ports, err)
	}
	return int(ports[0].Local)
}

// stGet fetches a URL, retrying while the pod's server starts.
func stGet(t *testing.T, rawURL string) string {
	t.Helper()
	var answer string
	var err error
	if testutil.PollUntil(20*time.Second, 200*time.Millisecond, func() bool {
		var resp *http.Response
		if resp, err = http.Get(rawURL); err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				answer = string(body)
				return true
			}
		}
		return false
	}) {
		return answer
	}
	t.Fatalf("GET %s: %v", rawURL, err)
	return ""
}

func TestPortForwardToPodServer(t *testing.T) {
	d := StartDaemon(t)
	for _, tc := range []struct{ name, addr string }{
		{"all-interfaces", "8080"},
		// Reachable only from inside the pod's network namespace: proves we enter it rather
		// than dial the pod IP.
		{"pod-loopback-only", "127.0.0.1:8080"},
		// Not on the pod's loopback: reached through the pod IP, as pods of VM-based runtimes
		// are, whose loopback is not the namespace's.
		{"pod-ip-only", `$(ip -4 -o addr show eth0 | sed 's/.*inet \([0-9.]*\).*/\1/'):8080`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podID, ctrID := stPod(t, d, "st-pf", stHTTPD(tc.name, tc.addr), nil)
			// client-go's forwarder gives up on the first refused connection, as kubectl does.
			stWaitListening(t, d, ctrID, 8080)
			local := stForward(t, d, podID, 8080)
			for i := 0; i < 3; i++ { // several connections over one forwarding session
				if got := stGet(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", local)); got != "hello from "+tc.name+"\n" {
					t.Fatalf("GET through port-forward: %q", got)
				}
			}
		})
	}
}

// stWaitListening waits until something in the container's pod accepts connections on port.
func stWaitListening(t testing.TB, d *Daemon, ctrID string, port int) {
	t.Helper()
	// A listening socket of the pod's namespace, without connecting to it.
	probe := fmt.Sprintf("grep -Eq ':%04X [0-9A-F]+:0000 0A ' /proc/net/tcp /proc/net/tcp6", port)
	var err error
	if !testutil.PollUntil(20*time.Second, 100*time.Millisecond, func() bool {
		var resp *runtimeapi.ExecSyncResponse
		resp, err = d.Runtime.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", probe}, Timeout: 5})
		return err == nil && resp.ExitCode == 0
	}) {
		t.Fatalf("nothing listens on port %d in the pod (%v)", port, err)
	}
}

// stPortStreams opens one raw port-forward stream pair, as client-go does per connection, so
// that a test sees exactly what the server sends on each.
func stPortStreams(t testing.TB, d *Daemon, podID string, port int) (conn httpstream.Connection, data, errStream httpstream.Stream) {
	t.Helper()
	conn, data, errStream, err := stTryPortStreams(d, podID, port)
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		t.Fatal(err)
	}
	return conn, data, errStream
}

// stTryPortStreams is stPortStreams returning its error. To a port nobody listens on the server
// may end the pair, and reset its data stream, before it replied to the client's creation of
// that stream (cri-streaming hands a stream to the forwarder before its reply is sent): the
// client then sees "stream reset" from CreateStream, a failure as valid as the error stream's.
// The connection and the error stream then come back with the error, to read what it says.
func stTryPortStreams(d *Daemon, podID string, port int) (conn httpstream.Connection, data, errStream httpstream.Stream, err error) {
	resp, err := d.Runtime.PortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: podID})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("PortForward: %w", err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		return nil, nil, nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(&restclient.Config{})
	if err != nil {
		return nil, nil, nil, err
	}
	conn, _, err = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dial %s: %w", u, err)
	}
	headers := http.Header{}
	headers.Set("streamType", "error")
	headers.Set("port", strconv.Itoa(port))
	headers.Set("requestID", "0")
	errStream, err = conn.CreateStream(headers)
	if err != nil {
		conn.Close()
		return nil, nil, nil, fmt.Errorf("create the error stream: %w", err)
	}
	errStream.Close()
	headers.Set("streamType", "data")
	data, err = conn.CreateStream(headers)
	if err != nil {
		return conn, nil, errStream, fmt.Errorf("create the data stream: %w", err)
	}
	return conn, data, errStream, nil
}

func TestPortForwardHalfCloseReachesPodServer(t *testing.T) {
	d := StartDaemon(t)
	// wc -c answers only after its input ended: the client's half-close must reach it.
	podID, ctrID := stPod(t, d, "st-halfclose", "exec nc -ll -p 9090 -e wc -c", nil)
	stWaitListening(t, d, ctrID, 9090)
	var got, msg []byte
	// Retried: nc may not listen yet.
	if !testutil.PollUntil(20*time.Second, 200*time.Millisecond, func() bool {
		conn, data, errStream := stPortStreams(t, d, podID, 9090)
		_, _ = data.Write([]byte("12345"))
		data.Close() // half-close: no more data from the client
		got, _ = io.ReadAll(data)
		msg, _ = io.ReadAll(errStream)
		conn.Close()
		return strings.TrimSpace(string(got)) == "5"
	}) {
		t.Fatalf("port-forward answer %q (error stream %q), want 5", got, msg)
	}
}

func TestStreamingBadInputIsRejected(t *testing.T) {
	d := StartDaemon(t)
	podID, ctrID := stPod(t, d, "st-bad", sleeper, nil)
	stoppedPod, stoppedCtr := stPod(t, d, "st-bad-stopped", sleeper, nil)
	if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: stoppedCtr, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: stoppedPod}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cmd := []string{"true"}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		frag []string
	}{
		{"exec empty cmd", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Stdout: true})
			return err
		}, codes.InvalidArgument, []string{"cmd"}},
		{"exec no container id", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{Cmd: cmd, Stdout: true})
			return err
		}, codes.InvalidArgument, []string{"container_id"}},
		{"exec without streams", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd})
			return err
		}, codes.InvalidArgument, []string{"stdin", "stdout", "stderr"}},
		{"exec tty with stderr", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd, Stdout: true, Stderr: true, Tty: true})
			return err
		}, codes.InvalidArgument, []string{"tty", "stderr"}},
		{"exec unknown container", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "nosuchcontainer", Cmd: cmd, Stdout: true})
			return err
		}, codes.NotFound, []string{"nosuchcontainer", "not found"}},
		{"exec in a sandbox", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: podID, Cmd: cmd, Stdout: true})
			return err
		}, codes.NotFound, []string{"not a CRI container"}},
		{"exec in stopped container", func() error {
			_, err := d.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: stoppedCtr, Cmd: cmd, Stdout: true})
			return err
		}, codes.FailedPrecondition, []string{stoppedCtr, "not running"}},
		{"attach without streams", func() error {
			_, err := d.Runtime.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: ctrID})
			return err
		}, codes.InvalidArgument, []string{"stdin", "stdout", "stderr"}},
		{"attach to stopped container", func() error {
			_, err := d.Runtime.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: stoppedCtr, Stdout: true})
			return err
		}, codes.FailedPrecondition, []string{"not running"}},
		{"port-forward no sandbox id", func() error {
			_, err := d.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{})
			return err
		}, codes.InvalidArgument, []string{"pod_sandbox_id"}},
		{"port-forward bad port", func() error {
			_, err := d.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{70000}})
			return err
		}, codes.InvalidArgument, []string{"70000"}},
		{"port-forward unknown sandbox", func() error {
			_, err := d.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nosuchsandbox"})
			return err
		}, codes.NotFound, []string{"nosuchsandbox"}},
		{"port-forward stopped sandbox", func() error {
			_, err := d.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: stoppedPod})
			return err
		}, codes.FailedPrecondition, []string{"not ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), tc.code, tc.frag...) })
	}

	t.Run("port-forward to a closed port", func(t *testing.T) {
		// The server may end the pair before the data stream's creation is answered (see
		// stTryPortStreams): the error stream still says why.
		conn, data, errStream, err := stTryPortStreams(d, podID, 7777)
		if errStream == nil {
			t.Fatal(err)
		}
		defer conn.Close()
		msg, _ := io.ReadAll(errStream)
		var got []byte
		if data != nil {
			got, _ = io.ReadAll(data)
		}
		if !strings.Contains(string(msg), "7777") || !strings.Contains(string(msg), "connection refused") {
			t.Errorf("error stream %q: want the port and connection refused", msg)
		}
		if len(got) != 0 {
			t.Errorf("data stream carried %q", got)
		}
	})
	t.Run("exec session after the container stopped", func(t *testing.T) {
		_, ctr2 := stPod(t, d, "st-bad-late", sleeper, nil)
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctr2, Cmd: cmd, Stdout: true})
		if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: ctr2, Timeout: 10}); err != nil {
			t.Fatal(err)
		}
		err := stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "not running") {
			t.Errorf("session error %v, want one that says the container is not running", err)
		}
	})
	t.Run("exec of a missing binary", func(t *testing.T) {
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"/no/such/binary"}, Stdout: true, Stderr: true})
		var out bytes.Buffer
		err := stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
		if code := stExitCode(err); code != 126 && code != 127 {
			t.Errorf("session error %v (output %q), want exit code 126 or 127", err, out.String())
		}
	})
	t.Run("used token", func(t *testing.T) {
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd, Stdout: true})
		if err := stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
			t.Fatalf("first use: %v", err)
		}
		if err := stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
			t.Errorf("second use of a one-time URL succeeded")
		}
	})
	// The daemon is unharmed: it still serves sessions.
	var out bytes.Buffer
	if err := stSPDY(ctx, stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"echo", "alive"}, Stdout: true}), remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "alive\n" {
		t.Errorf("exec after bad input: %v, %q", err, out.String())
	}
}

// stOpenFDs counts the open file descriptors of a process.
func stOpenFDs(t testing.TB, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// stProcesses lists the command lines running in a container (its own PID namespace).
func stProcesses(t testing.TB, ctrID string) []string {
	t.Helper()
	ctx := context.Background()
	exec, err := suite.docker.ContainerExecCreate(ctx, ctrID, container.ExecOptions{Cmd: []string{"ps", "-o", "args"}, AttachStdout: true})
	if err != nil {
		t.Fatalf("docker exec ps: %v", err)
	}
	resp, err := suite.docker.ContainerExecAttach(ctx, exec.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("docker exec ps: %v", err)
	}
	defer resp.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, io.Discard, resp.Reader)
	var procs []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && line != "COMMAND" && !strings.HasPrefix(line, "ps ") {
			procs = append(procs, line)
		}
	}
	return procs
}

// TestFailingAndAbortedSessionsLeaveNothingBehind runs many sessions that fail or that the
// client abandons, then checks that cri-dockerd holds no more file descriptors (connections to
// clients, to Docker, to pods) than before, and that no exec'd process is left in the container.
func TestFailingAndAbortedSessionsLeaveNothingBehind(t *testing.T) {
	d := StartDaemon(t)
	podID, ctrID := stPod(t, d, "st-leak", sleeper, nil)
	_, doomedCtr := stPod(t, d, "st-leak-doomed", sleeper, nil)
	pid := d.cmd.Process.Pid

	round := func(urlsForDoomed []*url.URL) {
		// An exec the client abandons while the process writes: the failed write ends the
		// session and the process is killed.
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		u := stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", "while true; do echo tick; sleep 0.05; done"}, Stdout: true})
		_ = stSPDY(ctx, u, remotecommand.StreamOptions{Stdout: io.Discard})
		cancel()
		// An exec reading stdin whose client goes away: stdin ends, so does the process.
		ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
		u = stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
		pr, pw := io.Pipe()
		_ = stSPDY(ctx, u, remotecommand.StreamOptions{Stdin: pr, Stdout: io.Discard})
		cancel()
		pw.Close()
		// A missing binary, a port nobody listens on, a container that stopped after the URL.
		u = stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"/no/such/binary"}, Stdout: true})
		_ = stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: io.Discard})
		if conn, data, errStream, err := stTryPortStreams(d, podID, 7777); err == nil {
			_, _ = io.ReadAll(errStream)
			_, _ = io.ReadAll(data)
			conn.Close()
		} else if !strings.Contains(err.Error(), "create the data stream") {
			t.Fatal(err)
		} else {
			conn.Close()
		}
		for _, u := range urlsForDoomed {
			_ = stSPDY(t.Context(), u, remotecommand.StreamOptions{Stdout: io.Discard})
		}
		// RPCs that fail before any session.
		_, _ = d.Runtime.Exec(t.Context(), &runtimeapi.ExecRequest{ContainerId: "nosuch", Cmd: []string{"true"}, Stdout: true})
		_, _ = d.Runtime.Attach(t.Context(), &runtimeapi.AttachRequest{ContainerId: ctrID})
	}

	round(nil) // warm up: Docker client connections, the HTTP server
	time.Sleep(500 * time.Millisecond)
	before := stOpenFDs(t, pid)

	const rounds = 15
	var doomed []*url.URL
	for i := 0; i < rounds; i++ {
		doomed = append(doomed, stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: doomedCtr, Cmd: []string{"true"}, Stdout: true}))
	}
	if _, err := d.Runtime.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: doomedCtr, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rounds; i++ {
		round(doomed[i : i+1])
	}

	// Idle keep-alive connections to Docker may come and go: allow a few.
	const slack = 4
	var after int
	testutil.PollUntil(10*time.Second, 200*time.Millisecond, func() bool {
		after = stOpenFDs(t, pid)
		return after <= before+slack
	})
	t.Logf("open fds of cri-dockerd: %d before, %d after %d rounds", before, after, rounds)
	if after > before+slack {
		t.Errorf("cri-dockerd holds %d file descriptors after %d rounds of failing sessions, %d before", after, rounds, before)
		if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			var links []string
			for _, e := range entries {
				l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
				links = append(links, l)
			}
			t.Logf("open fds: %v", links)
		}
	}
	var procs []string
	if !testutil.PollUntil(10*time.Second, 200*time.Millisecond, func() bool {
		procs = stProcesses(t, ctrID)
		for _, p := range procs {
			if strings.Contains(p, "tick") || p == "cat" || strings.Contains(p, "sleep 0.05") {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("exec'd processes left in the container: %q", procs)
	}
	// The daemon still serves.
	var out bytes.Buffer
	if err := stSPDY(t.Context(), stExecURL(t, d, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"echo", "alive"}, Stdout: true}), remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "alive\n" {
		t.Errorf("exec after failing sessions: %v, %q", err, out.String())
	}
}

// BenchmarkExecSyncOverhead compares an ExecSync round trip through cri-dockerd's socket with
// the same Docker calls made directly (exec create, attach, inspect), alternating the two.
//
//	go test -tags integration -run XXX -bench ExecSyncOverhead -benchtime=200x ./integration/
func BenchmarkExecSyncOverhead(b *testing.B) {
	d := StartDaemon(b)
	_, ctrID := stPod(b, d, "bench-exec", sleeper, nil)
	ctx := b.Context()
	cmd := []string{"echo", "hello"}
	var criTotal, dockerTotal time.Duration

	viaCRI := func() {
		start := time.Now()
		resp, err := d.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: cmd, Timeout: 10})
		criTotal += time.Since(start)
		if err != nil || string(resp.Stdout) != "hello\n" || resp.ExitCode != 0 {
			b.Fatalf("ExecSync: %v %+v", err, resp)
		}
	}
	viaDocker := func() {
		start := time.Now()
		exec, err := suite.docker.ContainerExecCreate(ctx, ctrID, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		resp, err := suite.docker.ContainerExecAttach(ctx, exec.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		_, err = stdcopy.StdCopy(&stdout, &stderr, resp.Reader)
		resp.Close()
		if err != nil {
			b.Fatal(err)
		}
		for {
			inspect, err := suite.docker.ContainerExecInspect(ctx, exec.ID)
			if err != nil {
				b.Fatal(err)
			}
			if !inspect.Running {
				break
			}
			time.Sleep(time.Millisecond)
		}
		dockerTotal += time.Since(start)
		if stdout.String() != "hello\n" {
			b.Fatalf("docker exec output %q", stdout.String())
		}
	}

	alternate(b, viaCRI, viaDocker, &criTotal, &dockerTotal)
}
