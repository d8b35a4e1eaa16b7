// Package streaming serves exec, attach and port-forward sessions for cri-dockerd: a Runtime for
// k8s.io/cri-streaming's server on top of libdocker, and the HTTP server that carries it. The
// SPDY and websocket protocols (remotecommand v1-v4, portforward.k8s.io) come from cri-streaming.
package streaming

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/net/netutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cristreaming "k8s.io/cri-streaming/pkg/streaming"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// DefaultBindAddr is loopback and a free port: a node's kubelet reaches it, nothing else does.
// Upstream cri-dockerd listens on every interface by default; we do not.
const DefaultBindAddr = "127.0.0.1:0"

// The HTTP server's bounds. Each exec, attach or port-forward session is one connection that
// is upgraded (SPDY or websocket) and hijacked: net/http clears its deadlines and no longer
// times it, and cri-streaming's own timeouts bound the session (StreamCreationTimeout, 30 s,
// for the client to open its streams; StreamIdleTimeout, 4 h, without traffic). Before that a
// connection must send its request's header within 30 s, and one left idle after a request is
// closed after 1 minute: clients open a connection per session, so keeping one alive gains
// nothing. At most 1024 connections are served at once, far more sessions than a node's kubelet
// holds, and few enough that whoever reaches the port cannot take the process's file
// descriptors; the next wait in the kernel's accept queue until one closes. No ReadTimeout or
// WriteTimeout: how long a session lasts is for cri-streaming's timeouts to say.
const (
	maxConns          = 1024
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = time.Minute
)

// httpLimits are the HTTP server's bounds; tests give small ones.
type httpLimits struct {
	maxConns                       int
	readHeaderTimeout, idleTimeout time.Duration
}

// Options configure the streaming server.
type Options struct {
	// BindAddr is HOST:PORT, HOST alone (a free port) or :PORT (every interface). Empty means
	// DefaultBindAddr. Port 0 picks a free port.
	BindAddr string
	Docker   libdocker.Client
	// Logger defaults to logrus' standard logger.
	Logger *logrus.Entry
	// StreamIdleTimeout closes a session without traffic for this long (default 4h, the
	// kubelet's --streaming-connection-idle-timeout default).
	StreamIdleTimeout time.Duration
	// OnSession, when set, hears each session start (+1) and end (-1), by kind.
	OnSession func(kind string, delta int)
	// Proc is the host's procfs, where the kill of an ended session's process checks that
	// Docker's exec PID is the process (default /proc; see package execkill).
	Proc string
}

// Server listens on its bind address from construction on, hands out absolute URLs for
// sessions (http://host:port/exec/TOKEN ...) and serves them. It implements core.StreamingServer.
type Server struct {
	cri     cristreaming.Server
	runtime *Runtime
	http    *http.Server
	lis     net.Listener
	baseURL *url.URL
	log     *logrus.Entry

	stopOnce sync.Once
}

// NewServer listens on opts.BindAddr and builds the cri-streaming server whose URLs point at
// the address it really listens on. Call Serve to serve and Stop to end.
func NewServer(opts Options) (*Server, error) {
	return newServer(opts, httpLimits{maxConns: maxConns, readHeaderTimeout: readHeaderTimeout, idleTimeout: idleTimeout})
}

func newServer(opts Options, lim httpLimits) (*Server, error) {
	if opts.Docker == nil {
		return nil, errors.New("streaming server: no Docker client")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	addr, err := NormalizeBindAddr(opts.BindAddr)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming server: listen on %s: %w", addr, err)
	}
	tcp := lis.Addr().(*net.TCPAddr)
	baseURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(advertisedHost(tcp.IP, net.InterfaceAddrs), fmt.Sprint(tcp.Port)), Path: "/"}

	cfg := cristreaming.DefaultConfig
	cfg.Addr = lis.Addr().String()
	cfg.BaseURL = baseURL
	if opts.StreamIdleTimeout > 0 {
		cfg.StreamIdleTimeout = opts.StreamIdleTimeout
	}
	// Every SPDY protocol cri-streaming speaks (remotecommand v4..v1, portforward.k8s.io), stated
	// here so that a narrower default upstream does not silently lock out older clients.
	// Websocket requests (channel.k8s.io, v4.channel.k8s.io and their base64 forms) are served
	// whatever these lists say.
	cfg.SupportedRemoteCommandProtocols = cristreaming.DefaultConfig.SupportedRemoteCommandProtocols
	cfg.SupportedPortForwardProtocols = cristreaming.DefaultConfig.SupportedPortForwardProtocols

	rt := NewRuntime(opts.Docker, opts.Logger)
	rt.OnSession = opts.OnSession
	if opts.Proc != "" {
		rt.killer.Proc = opts.Proc
	}
	cri, err := cristreaming.NewServer(cfg, rt)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	s := &Server{cri: cri, runtime: rt, lis: netutil.LimitListener(lis, lim.maxConns), baseURL: baseURL, log: opts.Logger}
	// Our own http.Server on our own listener rather than cri's Start: Start listens by itself
	// and only then learns the port, racing with the first Get* call, and it would advertise
	// 0.0.0.0 or [::] for an unspecified bind address. Its server has no timeouts either.
	s.http = &http.Server{Handler: cri, ReadHeaderTimeout: lim.readHeaderTimeout, IdleTimeout: lim.idleTimeout}
	return s, nil
}

// URL is the base of every session URL, e.g. http://127.0.0.1:41234/.
func (s *Server) URL() string { return s.baseURL.String() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves sessions until Stop; it returns nil after Stop.
func (s *Server) Serve() error {
	err := s.http.Serve(s.lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Stop closes the listener and ends every session: http.Server cannot close hijacked (SPDY or
// websocket) connections, so the runtime ends them by cancelling their Docker streams.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.runtime.stop()
		err = s.http.Close()
	})
	return err
}

// GetExec validates an exec request and returns its URL.
func (s *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return s.cri.GetExec(req)
}

// GetAttach validates an attach request and returns its URL.
func (s *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return s.cri.GetAttach(req)
}

// GetPortForward validates a port-forward request and returns its URL.
func (s *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return s.cri.GetPortForward(req)
}

// NormalizeBindAddr turns a --streaming-bind-addr value into HOST:PORT. "" is DefaultBindAddr
// (upstream cri-dockerd takes "" as every interface; we do not); a bare host gets port 0.
func NormalizeBindAddr(addr string) (string, error) {
	if addr == "" {
		return DefaultBindAddr, nil
	}
	hostport := addr
	if _, _, err := net.SplitHostPort(addr); err != nil {
		hostport = net.JoinHostPort(strings.Trim(addr, "[]"), "0")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || strings.ContainsAny(host, " /[]") {
		return "", fmt.Errorf("--streaming-bind-addr %q: want HOST:PORT, HOST or :PORT", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("--streaming-bind-addr %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return net.JoinHostPort(host, port), nil
}

// advertisedHost is the host that session URLs carry for a listener on ip. A specific address
// is used as it is. For an unspecified one (0.0.0.0 or ::, every interface) we choose the
// node's first non-loopback unicast address, IPv4 before IPv6 (interfaces in the kernel's
// order, which puts the primary NIC before bridges such as docker0 on ordinary nodes), since
// the kubelet, or an API server proxying to it, must reach the URL; 127.0.0.1 when the node
// has no such address. Link-local addresses are skipped: they need a zone in a URL.
func advertisedHost(ip net.IP, interfaceAddrs func() ([]net.Addr, error)) string {
	if !ip.IsUnspecified() {
		return ip.String()
	}
	addrs, err := interfaceAddrs()
	if err == nil {
		var v6 net.IP
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			if ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
			if v6 == nil && ip.To4() == nil {
				v6 = ipn.IP
			}
		}
		if v6 != nil {
			return v6.String()
		}
	}
	return "127.0.0.1"
}
