package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// KeepAliveGet sends GET path on conn as HTTP/1.1 and reads the whole answer, which must keep
// the connection open; conn is then idle. It returns the answer's status code.
func KeepAliveGet(conn net.Conn, path string) (int, error) {
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		return 0, err
	}
	return readAnswer(conn)
}

func readAnswer(conn net.Conn) (int, error) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.Close {
		return 0, fmt.Errorf("answer %s closes the connection; want it kept alive", resp.Status)
	}
	return resp.StatusCode, nil
}

// WaitClosedByPeer reads conn until the other end closes it: nil at EOF (or a reset), an error
// when data comes instead or Scaled(timeout) passes first.
func WaitClosedByPeer(conn net.Conn, timeout time.Duration) error {
	wait := Scaled(timeout)
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	n, err := conn.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("data came, not the end of the connection")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("still open after %v", wait)
	case err != nil:
		return nil
	}
	return errors.New("read returned nothing and no error")
}

// unansweredWindow is how long a request over a listener's cap must go unanswered. Waiting
// for something not to happen needs a time: this one can only let a broken cap pass on a
// machine stalled for longer, never fail a working one.
const unansweredWindow = 300 * time.Millisecond

// CheckConnCap checks a server on addr whose listener serves max connections at once: max
// kept-alive connections are answered, a request on one more is not while they stay open (its
// connection waits in the kernel's accept queue), and it is answered once one of them closes.
func CheckConnCap(t testing.TB, addr, path string, max int) {
	t.Helper()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := KeepAliveGet(c, path); err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, max, err)
		}
	}
	next, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := fmt.Fprintf(next, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	if err := next.SetReadDeadline(time.Now().Add(unansweredWindow)); err != nil {
		t.Fatal(err)
	}
	if _, err := readAnswer(next); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d, over the cap of %d, got an answer (%v); want it to wait", max+1, max, err)
	}
	held[0].Close()
	if err := next.SetReadDeadline(time.Now().Add(Scaled(10 * time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := readAnswer(next); err != nil {
		t.Fatalf("connection %d once another closed: %v; want it answered", max+1, err)
	}
}

// CheckIdleConnClosed checks that the server on addr closes a kept-alive connection left idle
// after one request, waiting up to Scaled(timeout).
func CheckIdleConnClosed(t testing.TB, addr, path string, timeout time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := KeepAliveGet(c, path); err != nil {
		t.Fatal(err)
	}
	if err := WaitClosedByPeer(c, timeout); err != nil {
		t.Fatalf("an idle kept-alive connection: %v; want the server to close it", err)
	}
}
