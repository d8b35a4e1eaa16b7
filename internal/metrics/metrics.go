// Package metrics exposes cri-dockerd's Prometheus metrics: CRI call latency and errors,
// Docker call latency, pods by runtime handler and streaming sessions, on an opt-in listener
// that also serves /debug/pprof.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
}

// New registers every collector; podsByHandler, when given, is asked at each scrape.
func New(podsByHandler func() map[string]int) *Metrics {
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
	}
	m.registry.MustRegister(m.rpcDuration, m.rpcErrors, m.dockerDuration, m.dockerErrors, m.StreamingSessions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if podsByHandler != nil {
		m.registry.MustRegister(&handlerCollector{count: podsByHandler, desc: prometheus.NewDesc(
			namespace+"_pod_sandboxes", "Pod sandboxes by RuntimeClass handler (\"\" is Docker's default runtime).",
			[]string{"runtime_handler"}, nil)})
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

// Handler serves /metrics and /debug/pprof/.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Serve listens on addr and serves Handler until ctx ends. It returns the listener's address
// once it listens (useful with port 0).
func (m *Metrics) Serve(ctx context.Context, addr string) (net.Addr, <-chan error, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
