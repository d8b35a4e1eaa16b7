// Package metrics exposes cri-dockerd's Prometheus metrics: CRI call latency and errors,
// Docker call latency, pods by runtime handler, streaming sessions, log followers and their
// failed writes, and container stats refreshes, on an opt-in listener that serves Go's
// /debug/pprof too when asked. packaging/monitoring has a Grafana dashboard and alert rules for
// them.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

const namespace = "cri_dockerd"

// Metrics holds the collectors of one cri-dockerd process.
type Metrics struct {
	registry       *prometheus.Registry
	rpcDuration    *prometheus.HistogramVec
	rpcErrors      *prometheus.CounterVec
	dockerDuration *prometheus.HistogramVec
	dockerErrors   *prometheus.CounterVec
	// StreamingSessions counts open exec, attach and port-forward sessions.
	StreamingSessions *prometheus.GaugeVec
	statsRefresh      prometheus.Histogram
	statsErrors       prometheus.Counter
	logWriteFailures  prometheus.Counter
}

// Sources are what the metrics ask at each scrape; a nil one is not reported.
type Sources struct {
	// PodsByHandler counts the pod sandboxes by RuntimeClass handler.
	PodsByHandler func() map[string]int
	// LogFollowers counts the containers whose logs are being copied to their CRI log files.
	LogFollowers func() int
}

// New registers every collector.
func New(src Sources) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cri_request_duration_seconds",
			Help:    "Latency of CRI calls by method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"method"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cri_request_errors_total",
			Help: "CRI calls that failed, by method and gRPC code.",
		}, []string{"method", "code"}),
		dockerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "docker_operation_duration_seconds",
			Help:    "Latency of Docker Engine API calls by operation (method and path pattern).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"operation"}),
		dockerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "docker_operation_errors_total",
			Help: "Docker Engine API calls that failed (transport errors and HTTP status >= 400), by operation.",
		}, []string{"operation"}),
		StreamingSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "streaming_sessions",
			Help: "Open streaming sessions by kind (exec, attach, portforward).",
		}, []string{"kind"}),
		statsRefresh: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "stats_refresh_duration_seconds",
			Help:    "Time one container's stats refresh took (cgroup files, or Docker's stats), the wait for a free refresh slot included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "stats_refresh_errors_total",
			Help: "Container stats refreshes that failed (a container Docker no longer has is not counted).",
		}),
		logWriteFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "log_write_failures_total",
			Help: "Writes to containers' CRI log files that failed (a full filesystem); their lines are copied again from Docker once a write succeeds.",
		}),
	}
	m.registry.MustRegister(m.rpcDuration, m.rpcErrors, m.dockerDuration, m.dockerErrors, m.StreamingSessions,
		m.statsRefresh, m.statsErrors, m.logWriteFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if src.PodsByHandler != nil {
		m.registry.MustRegister(&handlerCollector{count: src.PodsByHandler, desc: prometheus.NewDesc(
			namespace+"_pod_sandboxes", "Pod sandboxes by RuntimeClass handler (\"\" is Docker's default runtime).",
			[]string{"runtime_handler"}, nil)})
	}
	if src.LogFollowers != nil {
		m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "log_followers",
			Help: "Containers whose logs are being copied from Docker to their CRI log files.",
		}, func() float64 { return float64(src.LogFollowers()) }))
	}
	return m
}

// handlerCollector reads the pod counts at scrape time, so they are never stale.
type handlerCollector struct {
	count func() map[string]int
	desc  *prometheus.Desc
}

func (c *handlerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *handlerCollector) Collect(ch chan<- prometheus.Metric) {
	for handler, n := range c.count() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), handler)
	}
}

// method turns "/runtime.v1.RuntimeService/RunPodSandbox" into "RunPodSandbox".
func method(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

func (m *Metrics) observeRPC(fullMethod string, start time.Time, err error) {
	name := method(fullMethod)
	m.rpcDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		m.rpcErrors.WithLabelValues(name, status.Code(err).String()).Inc()
	}
}

// UnaryInterceptor records each CRI call.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observeRPC(info.FullMethod, start, err)
		return resp, err
	}
}

// StreamInterceptor records each streaming CRI call (events, stream lists).
func (m *Metrics) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.observeRPC(info.FullMethod, start, err)
		return err
	}
}

// ObserveDocker records one Docker Engine API call; libdocker calls it for every request.
func (m *Metrics) ObserveDocker(operation string, d time.Duration, failed bool) {
	m.dockerDuration.WithLabelValues(operation).Observe(d.Seconds())
	if failed {
		m.dockerErrors.WithLabelValues(operation).Inc()
	}
}

// ObserveStatsRefresh records one container's stats refresh (stats.Config.OnRefresh).
func (m *Metrics) ObserveStatsRefresh(d time.Duration, failed bool) {
	m.statsRefresh.Observe(d.Seconds())
	if failed {
		m.statsErrors.Inc()
	}
}

// LogWriteFailed records a write to a CRI log file that failed (containerlog.Manager.WriteFailed).
func (m *Metrics) LogWriteFailed() { m.logWriteFailures.Inc() }

// Handler serves /metrics, and /debug/pprof/ when pprof is set; without it /debug/pprof is not
// found, since the listener has no authentication and a profile shows the process's memory
// and command line, and a CPU profile or trace costs CPU.
func (m *Metrics) Handler(pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	if pprof {
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	}
	return mux
}

// LoopbackOnly reports whether a listener on addr (HOST:PORT) is reachable from this node
// alone: its host is a loopback IP or "localhost". An empty host, 0.0.0.0, ::, a routable IP
// and any other name are not; names are not resolved.
func LoopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// The metrics listener's bounds, so that whoever reaches the port cannot hold it for nothing.
// Prometheus keeps one connection to a target and scrapes it every 15 to 60 s: 64 connections at
// once leave room for a few scrapers and a person with curl, and one idle for 2 minutes (longer
// than a scrape interval, so a scraper's connection is kept) is closed. A request's header must
// come within 10 s. There is no WriteTimeout: a CPU profile or trace answers after the seconds
// it was asked for, and net/http/pprof refuses one longer than a WriteTimeout.
const (
	maxConns          = 64
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// limits are the listener's bounds; tests give small ones.
type limits struct {
	maxConns                       int
	readHeaderTimeout, idleTimeout time.Duration
}

// Serve listens on addr and serves Handler(pprof) until ctx ends. It returns the listener's
// address once it listens (useful with port 0). At most 64 connections are served at once; the
// next wait in the kernel's accept queue until one closes.
func (m *Metrics) Serve(ctx context.Context, addr string, pprof bool) (net.Addr, <-chan error, error) {
	return m.serve(ctx, addr, pprof, limits{maxConns: maxConns, readHeaderTimeout: readHeaderTimeout, idleTimeout: idleTimeout})
}

func (m *Metrics) serve(ctx context.Context, addr string, pprof bool, lim limits) (net.Addr, <-chan error, error) {
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	lis := netutil.LimitListener(tcp, lim.maxConns)
	srv := &http.Server{Handler: m.Handler(pprof), ReadHeaderTimeout: lim.readHeaderTimeout, IdleTimeout: lim.idleTimeout}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	return lis.Addr(), done, nil
}
