//go:build linux

package netns

import (
	"net"
	"os"
	"testing"
)

// Do in the test's own namespace: fn runs, and its socket works after Do returns.
func TestDoRunsInTheNamespaceAndReturns(t *testing.T) {
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conn net.Conn
	var dialErr error
	if err := Do(ns, func() { conn, dialErr = net.Dial("tcp", l.Addr().String()) }); err != nil || dialErr != nil {
		t.Fatalf("Do: %v, dial: %v", err, dialErr)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Errorf("the connection made inside does not work outside: %v", err)
	}

	bad, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	called := false
	if err := Do(bad, func() { called = true }); err == nil || called {
		t.Errorf("Do with a file that is not a namespace: error %v, fn called %v", err, called)
	}
}
