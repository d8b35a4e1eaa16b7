//go:build integration

package integration

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut holds the ports freeHostPort gave, so that no two tests of a run get the same.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeHostPort is a TCP port nothing listens on, for a pod's hostPort. It is taken below the
// kernel's ephemeral range: a port from bind(0) can come back as the source port of an outgoing
// connection before docker-proxy binds it, and the pod then fails with "address already in use".
func freeHostPort(t testing.TB) int {
	t.Helper()
	lo := ephemeralPortLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		p := 10000 + rand.IntN(lo-10000)
		if handedOut.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		handedOut.ports[p] = true
		return p
	}
	t.Fatalf("no free TCP port below %d", lo)
	return 0
}

// ephemeralPortLow is the first port of the kernel's ephemeral range (Linux's default 32768).
func ephemeralPortLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 11000 {
		return 32768
	}
	return lo
}
