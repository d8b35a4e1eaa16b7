//go:build integration

package integration

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// dockerProxy stands between cri-dockerd and a dockerd on a unix socket of its own, passing
// every call through (events and hijacked streams too), except that it can hold Docker's
// answer to a container create: Docker has made the container, and the caller does not know
// yet. It stands for a Docker slow to answer while our caller gives up.
type dockerProxy struct {
	Host string // unix://…, for cri-dockerd's --docker-endpoint

	mu    sync.Mutex
	holds []*heldCreate
	calls map[string]int // by "METHOD /path" with IDs and the API version left out
}

// heldCreate is a hold on the answer to creates whose container name holds a fragment.
type heldCreate struct {
	fragment string
	seen     chan struct{} // closed when Docker has answered the first such create
	release  chan struct{} // closed to let the answers go
	once     sync.Once
}

// startDockerProxy serves a proxy to the dockerd at upstream (unix://…) until the test ends.
func startDockerProxy(t testing.TB, upstream string) *dockerProxy {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(upstream, "unix://")
	p := &dockerProxy{Host: "unix://" + sock, calls: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}},
		FlushInterval:  -1, // events and logs stream as Docker sends them
		ModifyResponse: p.hold,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.count(r)
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		for _, h := range p.holds {
			h.Release()
		}
		p.mu.Unlock()
		srv.Close()
	})
	return p
}

var (
	apiVersionPrefix = regexp.MustCompile(`^/v[0-9.]+/`)
	objectID         = regexp.MustCompile(`/[0-9a-f]{64}(/|$)`)
)

func (p *dockerProxy) count(r *http.Request) {
	path := apiVersionPrefix.ReplaceAllString(r.URL.Path, "/")
	path = objectID.ReplaceAllString(path, "/{id}$1")
	p.mu.Lock()
	p.calls[r.Method+" "+path]++
	p.mu.Unlock()
}

// Calls returns the calls made through the proxy since the last Calls, by kind.
func (p *dockerProxy) Calls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := p.calls
	p.calls = map[string]int{}
	return calls
}

// HoldCreate holds the answers to creates of containers whose name holds fragment, until
// Release.
func (p *dockerProxy) HoldCreate(fragment string) *heldCreate {
	h := &heldCreate{fragment: fragment, seen: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// Release lets the held answers go.
func (h *heldCreate) Release() { h.once.Do(func() { close(h.release) }) }

func (p *dockerProxy) hold(resp *http.Response) error {
	r := resp.Request
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/containers/create") {
		return nil
	}
	name := r.URL.Query().Get("name")
	p.mu.Lock()
	var h *heldCreate
	for _, c := range p.holds {
		if strings.Contains(name, c.fragment) {
			h = c
		}
	}
	p.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h.seen:
	default:
		close(h.seen)
	}
	<-h.release
	return nil
}

// shortTempDir is a temporary directory with a short path: a unix socket's path has 108 bytes.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crid-px-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
