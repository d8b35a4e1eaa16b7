package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// runningContainer creates and starts a container in the fake daemon.
func runningContainer(t *testing.T, fake *libdocker.Fake, hc *container.HostConfig) string {
	t.Helper()
	ctx := context.Background()
	if _, err := fake.InspectImage(ctx, "busybox:1.36"); err != nil {
		fake.AddImage(libdocker.FakeImage("", "", "busybox:1.36"))
	}
	return testutil.RunningContainer(t, fake, "c-"+strconv.FormatInt(time.Now().UnixNano(), 36), &container.Config{Image: "busybox:1.36"}, hc)
}

// startServer serves a streaming server on loopback for the test, with the server's own bounds.
func startServer(t *testing.T, fake *libdocker.Fake) *Server {
	t.Helper()
	return serveWithLimits(t, fake, httpLimits{maxConns: maxConns, readHeaderTimeout: readHeaderTimeout, idleTimeout: idleTimeout})
}

func spdyExec(ctx context.Context, rawURL string, opts remotecommand.StreamOptions) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewSPDYExecutor(&restclient.Config{}, "POST", u)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

func TestNormalizeBindAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "127.0.0.1:0"},
		{"127.0.0.1:10010", "127.0.0.1:10010"},
		{"0.0.0.0", "0.0.0.0:0"},
		{":10010", ":10010"},
		{"::1", "[::1]:0"},
		{"[::1]", "[::1]:0"},
		{"[::]:8080", "[::]:8080"},
		{"node.example:0", "node.example:0"},
	} {
		got, err := NormalizeBindAddr(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeBindAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1", "a b:1", "/tmp/sock"} {
		if got, err := NormalizeBindAddr(bad); err == nil {
			t.Errorf("NormalizeBindAddr(%q) = %q, want an error", bad, got)
		}
	}
}

func TestAdvertisedHostForUnspecifiedAddressIsFirstNonLoopback(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	addrs := func(list ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			out := make([]net.Addr, 0, len(list))
			for _, s := range list {
				out = append(out, cidr(s))
			}
			return out, nil
		}
	}
	for _, tc := range []struct {
		listen string
		addrs  func() ([]net.Addr, error)
		want   string
	}{
		{"10.1.2.3", addrs("10.9.9.9/8"), "10.1.2.3"},
		{"::1", addrs("10.9.9.9/8"), "::1"},
		{"0.0.0.0", addrs("127.0.0.1/8", "::1/128", "fe80::1/64", "2001:db8::5/64", "192.168.1.20/24", "172.17.0.1/16"), "192.168.1.20"},
		{"::", addrs("127.0.0.1/8", "fe80::1/64", "2001:db8::5/64"), "2001:db8::5"},
		{"0.0.0.0", addrs("127.0.0.1/8", "2001:db8::5/64"), "127.0.0.1"},
		{"0.0.0.0", addrs("127.0.0.1/8"), "127.0.0.1"},
		{"::", func() ([]net.Addr, error) { return nil, errors.New("no") }, "127.0.0.1"},
	} {
		if got := advertisedHost(net.ParseIP(tc.listen), tc.addrs); got != tc.want {
			t.Errorf("advertisedHost(%s) = %s, want %s", tc.listen, got, tc.want)
		}
	}
}

func TestServerHandsOutAbsoluteURLsWithTheRealPort(t *testing.T) {
	fake := libdocker.NewFake()
	s := startServer(t, fake)
	port := s.Addr().(*net.TCPAddr).Port
	if port == 0 {
		t.Fatal("listening on port 0")
	}
	want := fmt.Sprintf("http://127.0.0.1:%d/", port)
	if s.URL() != want {
		t.Errorf("URL %q, want %q", s.URL(), want)
	}
	for name, get := range map[string]func() (string, error){
		"exec": func() (string, error) {
			r, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"true"}, Stdout: true})
			return r.GetUrl(), err
		},
		"attach": func() (string, error) {
			r, err := s.GetAttach(&runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
			return r.GetUrl(), err
		},
		"portforward": func() (string, error) {
			r, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p"})
			return r.GetUrl(), err
		},
	} {
		got, err := get()
		if err != nil || !strings.HasPrefix(got, want+name+"/") || len(got) <= len(want+name+"/") {
			t.Errorf("%s URL %q (%v), want %s%s/TOKEN", name, got, err, want, name)
		}
	}
}

func TestExecReportsOutputAndNonZeroExitCodeToTheClient(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, nil)
	fake.SetExecHandler(func(_ string, cmd []string) libdocker.ExecResult {
		return libdocker.ExecResult{Stdout: "out:" + strings.Join(cmd, " "), Stderr: "err", ExitCode: 3}
	})
	s := startServer(t, fake)
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"do", "it"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = spdyExec(t.Context(), resp.Url, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	var exitErr interface{ ExitStatus() int }
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("session error %v, want exit code 3", err)
	}
	if stdout.String() != "out:do it" || stderr.String() != "err" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestExecInStoppedContainerFailsClearly(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, nil)
	s := startServer(t, fake)
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	err = spdyExec(t.Context(), resp.Url, remotecommand.StreamOptions{Stdout: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("session error %v, want one that says the container is not running", err)
	}
}

func TestStopEndsSessionsAndKillsTheirProcesses(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, nil)
	fake.SetExecHandler(func(string, []string) libdocker.ExecResult { return libdocker.ExecResult{Delay: time.Hour} })
	s, err := NewServer(Options{Docker: fake, Logger: quietLog(), Proc: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sleep"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- spdyExec(t.Context(), resp.Url, remotecommand.StreamOptions{Stdout: io.Discard}) }()
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return fake.ExecRunning(id) != 0 }, "exec never started")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("session still running after Stop")
	}
	if n := fake.ExecRunning(id); n != 0 {
		t.Errorf("%d exec'd processes still run after Stop", n)
	}
}

// pipeStream is the runtime's end of a port-forward stream whose client end the test holds;
// closing the client's writer is a half-close.
type pipeStream struct {
	io.Reader
	io.WriteCloser
}

func newPipeStream() (runtimeEnd pipeStream, clientIn *io.PipeWriter, clientOut *io.PipeReader) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	return pipeStream{Reader: inR, WriteCloser: outW}, inW, outR
}

// countingServer answers each connection with the number of bytes it read before EOF, so it
// answers only when the client's half-close reached it.
func countingServer(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				n, _ := io.Copy(io.Discard, conn)
				fmt.Fprint(conn, n)
			}()
		}
	}()
	return lis.Addr().(*net.TCPAddr).Port
}

func TestPortForwardHostNetworkSandboxWithHalfClose(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, &container.HostConfig{NetworkMode: "host"})
	port := countingServer(t)
	rt := NewRuntime(fake, quietLog())
	stream, in, out := newPipeStream()
	done := make(chan error, 1)
	go func() { done <- rt.PortForward(context.Background(), id, int32(port), stream) }()
	if _, err := in.Write([]byte("12345")); err != nil {
		t.Fatal(err)
	}
	in.Close()
	got, _ := io.ReadAll(out)
	if string(got) != "5" {
		t.Errorf("answer %q, want 5", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("PortForward: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PortForward did not return after the server closed")
	}
}

func TestPortForwardFailsClearly(t *testing.T) {
	fake := libdocker.NewFake()
	hostNet := runningContainer(t, fake, &container.HostConfig{NetworkMode: "host"})
	stopped := runningContainer(t, fake, nil)
	if err := fake.StopContainer(context.Background(), stopped, 0); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	rt := NewRuntime(fake, quietLog())
	for _, tc := range []struct {
		name, sandbox string
		port          int32
		want          []string
	}{
		{"closed port", hostNet, int32(closedPort), []string{strconv.Itoa(closedPort), "connection refused"}},
		{"bad port", hostNet, 0, []string{"not a TCP port"}},
		{"unknown sandbox", "nosuch", 80, []string{"nosuch", "does not exist"}},
		{"stopped sandbox", stopped, 80, []string{"not running"}},
	} {
		stream, _, _ := newPipeStream()
		err := rt.PortForward(context.Background(), tc.sandbox, tc.port, stream)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want it to mention %q", tc.name, err, w)
			}
		}
	}
}

// TestDialInNetNSReturnsTheThreadToItsNamespace enters our own network namespace (setns needs
// CAP_SYS_ADMIN even so) and checks that the dial works and no thread is left elsewhere.
func TestDialInNetNSReturnsTheThreadToItsNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setns needs root")
	}
	port := countingServer(t)
	ns, err := openNetNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	for i := 0; i < 20; i++ {
		conn, err := dialInNetNS(context.Background(), ns, int32(port))
		if err != nil {
			t.Fatalf("dialInNetNS: %v", err)
		}
		conn.Close()
	}
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if link, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && link != own {
			t.Errorf("thread %s is in network namespace %s, want %s", task.Name(), link, own)
		}
	}
}

// silentServer accepts connections, reads each to its EOF and never answers; its connections
// are closed when the test ends (or by closeAll).
type silentServer struct {
	port  int
	mu    sync.Mutex
	conns []net.Conn
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{port: lis.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() { lis.Close(); s.closeAll() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			go io.Copy(io.Discard, conn)
		}
	}()
	return s
}

func (s *silentServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// openFDs is how many files this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// A client that sends its request and leaves (EOF) does not hold a session whose server never
// answers: it ends once the pod's side was idle for the half-closed timeout. 1000 such
// sessions leave the goroutines and open files where they were.
func TestHalfClosedPortForwardsToASilentServerEnd(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, &container.HostConfig{NetworkMode: "host"})
	server := newSilentServer(t)
	rt := NewRuntime(fake, quietLog())
	rt.halfClosedIdle = 100 * time.Millisecond
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	for batch := 0; batch < 10; batch++ {
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for range 100 {
			stream, in, out := newPipeStream()
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- rt.PortForward(context.Background(), id, int32(server.port), stream)
			}()
			go func() {
				in.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				in.Close()
				io.Copy(io.Discard, out) // until the session closes the stream
			}()
		}
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(testutil.Scaled(30 * time.Second)):
			t.Fatalf("batch %d: half-closed sessions to a silent server did not end", batch)
		}
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("PortForward: %v", err)
			}
		}
	}
	server.closeAll()
	var nowG, nowF int
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		nowG, nowF = runtime.NumGoroutine(), openFDs(t)
		return nowG <= goroutines && nowF <= fds
	}, "after 1000 sessions: goroutines %d and open files %d did not come back", goroutines, fds)
	t.Logf("goroutines %d -> %d, open files %d -> %d after 1000 abandoned sessions", goroutines, nowG, fds, nowF)
}

// A sandbox has at most its cap of port-forward sessions open at once: one more is refused with
// a message that says why, another sandbox's is not, and one that ends makes room.
func TestPortForwardSessionsPerSandboxAreCapped(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, &container.HostConfig{NetworkMode: "host"})
	other := runningContainer(t, fake, &container.HostConfig{NetworkMode: "host"})
	server := newSilentServer(t)
	rt := NewRuntime(fake, quietLog())
	rt.maxPortForwards = 2
	type session struct {
		in   *io.PipeWriter
		done chan error
	}
	var open []session
	t.Cleanup(func() {
		for _, s := range open {
			s.in.CloseWithError(errors.New("client gone"))
			<-s.done
		}
	})
	// start opens a session and, unless it is refused, waits until the server has it.
	start := func(sandbox string) error {
		server.mu.Lock()
		before := len(server.conns)
		server.mu.Unlock()
		stream, in, out := newPipeStream()
		s := session{in, make(chan error, 1)}
		go func() { s.done <- rt.PortForward(context.Background(), sandbox, int32(server.port), stream) }()
		go io.Copy(io.Discard, out)
		var err error
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
			select {
			case err = <-s.done:
				return true
			default:
			}
			server.mu.Lock()
			defer server.mu.Unlock()
			return len(server.conns) > before
		}, "a session neither connected nor failed")
		if err == nil {
			open = append(open, s)
		}
		return err
	}
	for i := range 2 {
		if err := start(id); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
	}
	if err := start(id); err == nil || !strings.Contains(err.Error(), "2 sessions are open already") {
		t.Errorf("a third session: %v, want it refused for the cap of 2", err)
	}
	if err := start(other); err != nil {
		t.Errorf("another sandbox's session: %v", err)
	}
	first := open[0]
	open = open[1:]
	first.in.CloseWithError(errors.New("client gone"))
	if err := <-first.done; err != nil && !strings.Contains(err.Error(), "client gone") {
		t.Errorf("the first session: %v", err)
	}
	if err := start(id); err != nil {
		t.Errorf("a session after one ended: %v", err)
	}
}
