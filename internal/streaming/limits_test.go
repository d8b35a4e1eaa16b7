package streaming

import (
	"bytes"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// A path the server answers at once (an unknown session token) without closing the connection.
const unknownSession = "/exec/no-such-token"

// serveWithLimits serves a streaming server with the given bounds until the test ends.
func serveWithLimits(t *testing.T, fake *libdocker.Fake, lim httpLimits) *Server {
	t.Helper()
	s, err := newServer(Options{Docker: fake, Logger: quietLog(), Proc: t.TempDir()}, lim)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// Beyond the cap, a connection waits unanswered until another closes.
func TestStreamingServerCapsConnections(t *testing.T) {
	s := serveWithLimits(t, libdocker.NewFake(), httpLimits{maxConns: 2, readHeaderTimeout: time.Minute, idleTimeout: time.Hour})
	testutil.CheckConnCap(t, s.Addr().String(), unknownSession, 2)
}

// A kept-alive connection left idle is closed after the idle timeout.
func TestStreamingServerClosesIdleConnections(t *testing.T) {
	s := serveWithLimits(t, libdocker.NewFake(), httpLimits{maxConns: 2, readHeaderTimeout: time.Minute, idleTimeout: 50 * time.Millisecond})
	testutil.CheckIdleConnClosed(t, s.Addr().String(), unknownSession, 10*time.Second)
}

// The idle timeout is for idle HTTP connections, not for sessions: an exec session that stays
// quiet for longer still gets its command's output and exit code.
func TestQuietSessionOutlivesTheIdleTimeout(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, nil)
	release := make(chan struct{})
	fake.SetExecHandler(func(string, []string) libdocker.ExecResult {
		return libdocker.ExecResult{Stdout: "late", Release: release}
	})
	s := serveWithLimits(t, fake, httpLimits{maxConns: 4, readHeaderTimeout: time.Minute, idleTimeout: 50 * time.Millisecond})
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"wait"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- spdyExec(t.Context(), resp.Url, remotecommand.StreamOptions{Stdout: &stdout}) }()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the session ended before its command began: %v", err)
		default:
		}
		return fake.ExecRunning(id) != 0
	}, "exec never started")
	// A connection left idle after the session began is closed: the session's connection
	// has been quiet for longer than the idle timeout by then.
	testutil.CheckIdleConnClosed(t, s.Addr().String(), unknownSession, 10*time.Second)
	close(release)
	select {
	case err := <-done:
		if err != nil || stdout.String() != "late" {
			t.Errorf("session: %v, stdout %q; want the output and exit 0 after the idle timeout", err, stdout.String())
		}
	case <-time.After(testutil.Scaled(10 * time.Second)):
		t.Fatal("the session did not end once its command exited")
	}
}

// The bounds NewServer gives: an idle timeout, and no read or write timeout that would bound
// a session by the connection it started on.
func TestStreamingServerTimesIdleConnectionsNotSessions(t *testing.T) {
	s, err := NewServer(Options{Docker: libdocker.NewFake(), Logger: quietLog(), Proc: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.lis.Close() // Stop closes only a listener that Serve was given
	h := s.http
	if h.ReadHeaderTimeout != 30*time.Second || h.IdleTimeout != time.Minute || h.ReadTimeout != 0 || h.WriteTimeout != 0 {
		t.Errorf("ReadHeaderTimeout %v, IdleTimeout %v, ReadTimeout %v, WriteTimeout %v; want 30s, 1m, none, none",
			h.ReadHeaderTimeout, h.IdleTimeout, h.ReadTimeout, h.WriteTimeout)
	}
}
