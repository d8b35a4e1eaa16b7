package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
)

// dialTimeout bounds connecting to a port in a pod: loopback answers at once unless the
// listener's backlog is full.
const dialTimeout = 10 * time.Second

// PortForward connects stream to TCP port on the loopback address of the sandbox's network
// namespace, which every container of the pod shares. We enter that namespace from Go (see
// dialInNetNS) rather than fork nsenter and socat, so port-forward works on nodes without
// socat, and a server that listens only on 127.0.0.1 inside the pod is reachable. A sandbox on
// the host network is reached on the node's own loopback.
//
// When nothing answers on that loopback we dial the pod's IP from the node, as the kubelet's
// users would expect from a pod on a VM or user-space-kernel runtime (Kata, gVisor): there the
// pod's processes do not live in the namespace's kernel network stack, whose loopback is empty,
// but traffic to the pod IP reaches them.
func (r *Runtime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) (err error) {
	defer recoverSession(r.log, "port-forward", &err)
	defer r.session("portforward")()
	if port <= 0 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port (1-65535)", port)
	}
	ctx, cancel := r.stopContext(ctx)
	defer cancel()
	c, err := r.docker.InspectContainer(ctx, sandboxID)
	if err != nil {
		return containerError(err, sandboxID, "port-forward to sandbox")
	}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return fmt.Errorf("port-forward to pod sandbox %s: the sandbox is not running", sandboxID)
	}
	release, err := r.portForwards.acquire(c.ID, r.maxPortForwards)
	if err != nil {
		return err
	}
	defer release()
	var conn net.Conn
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsHost() {
		conn, err = dialLoopback(ctx, port)
	} else {
		conn, err = r.dialSandbox(ctx, c.ID, c.State.Pid, port)
		if err != nil {
			conn, err = dialPodIP(ctx, c, port, err)
		}
	}
	if err != nil {
		return fmt.Errorf("port-forward to pod sandbox %s: %w", sandboxID, err)
	}
	defer conn.Close()
	return proxy(ctx, conn, stream, r.halfClosedIdle)
}

// dialPodIP connects to port on the sandbox's IP from the node's namespace, after the pod's
// loopback failed with loopbackErr; its error tells both.
func dialPodIP(ctx context.Context, c *container.InspectResponse, port int32, loopbackErr error) (net.Conn, error) {
	ip := podIP(c)
	if ip == nil {
		return nil, loopbackErr
	}
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
	if err != nil {
		return nil, fmt.Errorf("%w; pod IP %s: %v", loopbackErr, ip, cause(err))
	}
	return conn, nil
}

// podIP is the sandbox's IPv4 address on a Docker network, else its IPv6 one, else nil.
func podIP(c *container.InspectResponse) net.IP {
	if c.NetworkSettings == nil {
		return nil
	}
	var v6 net.IP
	for _, n := range c.NetworkSettings.Networks {
		if n == nil {
			continue
		}
		if ip := net.ParseIP(n.IPAddress); ip != nil {
			return ip
		}
		if ip := net.ParseIP(n.GlobalIPv6Address); ip != nil && v6 == nil {
			v6 = ip
		}
	}
	return v6
}

// dialSandbox connects to port in the network namespace of the sandbox's process pid. The
// namespace file is opened first and the sandbox inspected again afterwards, so that a PID that
// was reused after the sandbox died cannot lead us into another process's namespace.
func (r *Runtime) dialSandbox(ctx context.Context, id string, pid int, port int32) (net.Conn, error) {
	ns, err := openNetNS(pid)
	if err != nil {
		return nil, fmt.Errorf("network namespace of the sandbox (pid %d): %w", pid, err)
	}
	defer ns.Close()
	again, err := r.docker.InspectContainer(ctx, id)
	if err != nil || again.State == nil || !again.State.Running || again.State.Pid != pid {
		return nil, errors.New("the sandbox stopped while connecting")
	}
	return dialInNetNS(ctx, ns, port)
}

// dialLoopback connects to port on 127.0.0.1, then on [::1] for a server that listens on IPv6
// only, as containerd does. It runs in the namespace of the calling thread.
func dialLoopback(ctx context.Context, port int32) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	p := strconv.Itoa(int(port))
	conn, err4 := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err4 == nil {
		return conn, nil
	}
	conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return conn, nil
	}
	return nil, fmt.Errorf("connect to port %d on the pod's loopback: 127.0.0.1: %w; [::1]: %v", port, cause(err4), cause(err6))
}

// cause drops the "dial tcp4 ADDR:" prefix of a dial error, which the message already says.
func cause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// HalfClosedIdleTimeout ends a port-forward session whose client ended its side (EOF) once
// the pod's side has sent nothing for this long: a server that accepts and never answers
// would otherwise hold the session, its socket and buffer, for ever.
const HalfClosedIdleTimeout = time.Minute

// MaxPortForwardsPerSandbox bounds the port-forward sessions open to one sandbox at once: a
// loop of `kubectl port-forward` connections cannot hold the node's sockets.
const MaxPortForwardsPerSandbox = 256

// proxyBufferSize is the buffer of the pod-to-client copy of each session.
const proxyBufferSize = 32 << 10

// proxy copies between the pod's connection and the client's stream. The client ending its
// side (EOF) half-closes the pod's connection, so a server sees the end of a request and still
// answers; from then on the session ends once the pod's side is idle for halfClosedIdle. The
// pod's side ending (its server closed or failed) ends the session: the stream's Close sends
// the client EOF. A failure on the client's side closes the pod's connection.
func proxy(ctx context.Context, conn net.Conn, stream io.ReadWriteCloser, halfClosedIdle time.Duration) error {
	var halfClosed atomic.Bool
	go func() {
		_, err := io.Copy(conn, stream)
		if hc, ok := conn.(interface{ CloseWrite() error }); ok && err == nil {
			halfClosed.Store(true)
			_ = conn.SetReadDeadline(time.Now().Add(halfClosedIdle))
			_ = hc.CloseWrite()
			return
		}
		conn.Close()
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	err := copyToClient(stream, conn, &halfClosed, halfClosedIdle)
	// The client's side may still block in a read: it ends when the client removes the stream
	// or closes the connection, which cri-streaming's Close and the client see to.
	_ = stream.Close()
	if err != nil && (errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil) {
		return nil
	}
	return err
}

// copyToClient copies the pod's side to the client until it ends; once halfClosed, each read
// waits at most idle.
func copyToClient(stream io.Writer, conn net.Conn, halfClosed *atomic.Bool, idle time.Duration) error {
	buf := make([]byte, proxyBufferSize)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := stream.Write(buf[:n]); werr != nil {
				return werr
			}
			if halfClosed.Load() {
				_ = conn.SetReadDeadline(time.Now().Add(idle))
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// sandboxSessions counts the port-forward sessions per sandbox.
type sandboxSessions struct {
	mu    sync.Mutex
	count map[string]int
}

// acquire takes a session of sandbox id, or fails when it has max already; release gives it
// back.
func (s *sandboxSessions) acquire(id string, max int) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count[id] >= max {
		return nil, fmt.Errorf("port-forward to pod sandbox %s: %d sessions are open already, the most one pod may have", id, max)
	}
	if s.count == nil {
		s.count = map[string]int{}
	}
	s.count[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.count[id]--; s.count[id] == 0 {
			delete(s.count, id)
		}
	}, nil
}
