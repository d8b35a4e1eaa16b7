// Package standby serves the CRI on a gRPC server before the service behind it exists: while
// cri-dockerd waits for Docker at its start, Version answers what is known without Docker,
// Status answers RuntimeReady=false with the reason, and every other call answers Unavailable
// (gRPC's "retry me"). A call that comes before the first try to reach Docker has an outcome
// waits for it (FirstTryWait at most): systemd's socket activation starts cri-dockerd on the
// first connection, so that call is always early, and a client that asks once (kubeadm's
// preflight) would otherwise fail where Docker runs. Once the service is built, every call goes
// to it. The kubelet, crictl and
// systemd's socket activation so find a socket that answers from the first moment, as
// containerd's CRI does. Version is answered because the kubelet's CRI client and crictl check
// the connection with it first: Unavailable there, they never ask Status and never learn why.
package standby

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Service is what the gate hands calls to once it is ready.
type Service interface {
	runtimeapi.RuntimeServiceServer
	runtimeapi.ImageServiceServer
}

// Gate stands in for a Service until Serve.
type Gate struct {
	svc     atomic.Pointer[Service]
	version *runtimeapi.VersionResponse

	mu              sync.Mutex
	reason, message string
	// waiting is set by Waiting: the service could not be built at the first try.
	waiting bool

	// settled is closed by the first Serve or Waiting: the first try has an outcome.
	settled    chan struct{}
	settleOnce sync.Once
	// waiters counts the calls waiting for it (for the tests).
	waiters atomic.Int32
}

// FirstTryWait bounds how long a call waits for the first try to reach Docker (a Docker that
// accepts connections and never answers).
const FirstTryWait = 10 * time.Second

// New is a gate that answers Status not ready with reason and message until Serve or Waiting,
// and, once Waiting was called, Version with version (a copy each time: the fields known
// without Docker). Before the first Waiting (the first try to reach Docker, milliseconds where
// Docker runs) Version waits like the rest: a client that waits for an answer to Version
// before its first call (a script with `crictl version`) must not call in while the service is
// being built.
func New(version *runtimeapi.VersionResponse, reason, message string) *Gate {
	return &Gate{version: proto.Clone(version).(*runtimeapi.VersionResponse), reason: reason, message: message, settled: make(chan struct{})}
}

func (g *Gate) settle() { g.settleOnce.Do(func() { close(g.settled) }) }

// awaitFirstTry waits until the first try has an outcome, ctx ends or FirstTryWait passes.
func (g *Gate) awaitFirstTry(ctx context.Context) {
	g.waiters.Add(1)
	defer g.waiters.Add(-1)
	timer := time.NewTimer(FirstTryWait)
	defer timer.Stop()
	select {
	case <-g.settled:
	case <-ctx.Done():
	case <-timer.C:
	}
}

// Waiting changes what the gate answers while it waits (the last error, say).
func (g *Gate) Waiting(reason, message string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reason, g.message, g.waiting = reason, message, true
	g.settle()
}

// Serve hands every call from now on to svc.
func (g *Gate) Serve(svc Service) {
	g.svc.Store(&svc)
	g.settle()
}

// Ready reports whether Serve was called.
func (g *Gate) Ready() bool { return g.svc.Load() != nil }

// Register registers the RuntimeService and ImageService on server, answered by the gate.
func (g *Gate) Register(server *grpc.Server) {
	server.RegisterService(g.desc(&runtimeapi.RuntimeService_ServiceDesc, reflect.TypeFor[runtimeapi.RuntimeServiceServer]()), g)
	server.RegisterService(g.desc(&runtimeapi.ImageService_ServiceDesc, reflect.TypeFor[runtimeapi.ImageServiceServer]()), g)
}

// desc is a copy of the generated service description whose handlers ask the gate which server
// answers. Its HandlerType accepts any server, since the gate itself implements neither.
func (g *Gate) desc(orig *grpc.ServiceDesc, iface reflect.Type) *grpc.ServiceDesc {
	d := *orig
	d.HandlerType = (*any)(nil)
	d.Methods = make([]grpc.MethodDesc, len(orig.Methods))
	for i, m := range orig.Methods {
		d.Methods[i] = g.unary(d.ServiceName, m, iface)
	}
	d.Streams = make([]grpc.StreamDesc, len(orig.Streams))
	for i, s := range orig.Streams {
		d.Streams[i] = g.stream(s)
	}
	return &d
}

func (g *Gate) unary(service string, m grpc.MethodDesc, iface reflect.Type) grpc.MethodDesc {
	handler := m.Handler
	method, ok := iface.MethodByName(m.MethodName)
	if !ok {
		panic("standby: " + iface.String() + " has no method " + m.MethodName)
	}
	// (ctx, *Request): the request type to decode into while no service answers.
	request := method.Type.In(1).Elem()
	info := &grpc.UnaryServerInfo{Server: g, FullMethod: "/" + service + "/" + m.MethodName}
	m.Handler = func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		if svc := g.svc.Load(); svc != nil {
			return handler(*svc, ctx, dec, interceptor)
		}
		req := reflect.New(request).Interface()
		if err := dec(req); err != nil {
			return nil, err
		}
		// Status answers at once: it says why the runtime is not ready.
		if info.FullMethod != statusMethod {
			g.awaitFirstTry(ctx)
			if svc := g.svc.Load(); svc != nil {
				return handler(*svc, ctx, func(v any) error { proto.Merge(v.(proto.Message), req.(proto.Message)); return nil }, interceptor)
			}
		}
		answer := func(context.Context, any) (any, error) { return g.standIn(info.FullMethod, req) }
		if interceptor == nil {
			return answer(ctx, req)
		}
		return interceptor(ctx, req, info, answer)
	}
	return m
}

func (g *Gate) stream(s grpc.StreamDesc) grpc.StreamDesc {
	handler := s.Handler
	s.Handler = func(_ any, stream grpc.ServerStream) error {
		if svc := g.svc.Load(); svc == nil {
			g.awaitFirstTry(stream.Context())
		}
		if svc := g.svc.Load(); svc != nil {
			return handler(*svc, stream)
		}
		return g.unavailable()
	}
	return s
}

// The calls answered for real while waiting: Version, with which clients check the connection
// before anything else, and Status, from which the kubelet learns why the node is not ready.
var (
	versionMethod = "/" + runtimeapi.RuntimeService_ServiceDesc.ServiceName + "/Version"
	statusMethod  = "/" + runtimeapi.RuntimeService_ServiceDesc.ServiceName + "/Status"
)

func (g *Gate) standIn(method string, req any) (any, error) {
	g.mu.Lock()
	reason, message, waiting := g.reason, g.message, g.waiting
	g.mu.Unlock()
	switch {
	case method == versionMethod && waiting:
		return proto.Clone(g.version), nil
	case method == statusMethod:
	default:
		return nil, g.unavailable()
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Reason: reason, Message: message},
		{Type: runtimeapi.NetworkReady, Reason: reason, Message: message},
	}}}, nil
}

func (g *Gate) unavailable() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return status.Errorf(codes.Unavailable, "cri-dockerd is not serving yet: %s", g.message)
}
