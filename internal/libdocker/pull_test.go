package libdocker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

const testPullRef = "example.com/app:1"

// pullStep is one step of an emulated /images/create stream: a message, a pause, or a stall
// that lasts until the client goes away.
type pullStep struct {
	msg   *jsonmessage.JSONMessage
	pause time.Duration
	stall bool
	// until, when set, holds the stream until it returns true (polled), at most 10 s.
	until func() bool
}

func status(id, st string, current, total int64) pullStep {
	m := &jsonmessage.JSONMessage{ID: id, Status: st}
	if current > 0 || total > 0 {
		m.Progress = &jsonmessage.JSONProgress{Current: current, Total: total}
	}
	return pullStep{msg: m}
}

// fakePullServer emulates the Docker daemon's /_ping and /images/create with steps. clientGone
// is closed when a stalled stream saw its client cancel the request, arrived when the pull's
// request reached it.
func fakePullServer(t *testing.T, steps ...pullStep) (endpoint string, clientGone, arrived <-chan struct{}) {
	t.Helper()
	gone := make(chan struct{})
	came := make(chan struct{})
	release := make(chan struct{}) // ends a stall the client never cancelled, so Close returns
	mux := http.NewServeMux()
	mux.HandleFunc("/_ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		_, _ = io.WriteString(w, "OK")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/images/create") || r.URL.Query().Get("fromImage") != "example.com/app" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
			return
		}
		close(came)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		for _, s := range steps {
			switch {
			case s.msg != nil:
				_ = enc.Encode(s.msg)
				w.(http.Flusher).Flush()
			case s.stall:
				select {
				case <-r.Context().Done():
					close(gone)
				case <-release:
				}
				return
			case s.until != nil:
				testutil.PollUntil(10*time.Second, 5*time.Millisecond, s.until)
			default:
				time.Sleep(s.pause)
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { close(release); srv.Close() })
	return "tcp://" + srv.Listener.Addr().String(), gone, came
}

// testPullClient is the real client on endpoint, logging into the returned hook.
func testPullClient(t *testing.T, endpoint string, reportInterval time.Duration) (*client, *logtest.Hook) {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	c, err := New(Options{Endpoint: endpoint, Logger: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}
	real := c.(*client)
	real.pullReportInterval = reportInterval
	return real, hook
}

func TestPullImageProgressDeadline(t *testing.T) {
	// A deadline of 200 ms and messages every quarter of it, scaled with the machine's load: on
	// a busy machine a 50 ms pause between two messages took more than 200 ms, and the steady
	// progress was cut.
	deadline := testutil.Scaled(200 * time.Millisecond).Round(time.Millisecond)
	noProgress := "no pull progress for " + deadline.String()
	downloading := status("abc123", "Downloading", 1_000_000, 20_000_000)
	for _, tc := range []struct {
		name  string
		steps []pullStep
		// wantErr are parts of the error; none: the pull succeeds.
		wantErr []string
	}{
		{
			name:    "stalled while downloading",
			steps:   []pullStep{status("1", "Pulling from app", 0, 0), status("abc123", "Pulling fs layer", 0, 0), downloading, {stall: true}},
			wantErr: []string{testPullRef, noProgress, `(last: "abc123: Downloading 1MB/20MB")`},
		},
		{
			// The containerd image store repeats a stalled layer's progress every few seconds.
			name: "the same progress repeated",
			steps: func() []pullStep {
				s := []pullStep{status("abc123", "Pulling fs layer", 0, 0)}
				for i := 0; i < 12; i++ { // three deadlines of "Downloading 71B/142B", every quarter
					s = append(s, status("abc123", "Downloading", 71, 142), pullStep{pause: deadline / 4})
				}
				return append(s, pullStep{stall: true})
			}(),
			wantErr: []string{testPullRef, noProgress, `(last: "abc123: Downloading 71B/142B")`},
		},
		{
			name:    "no message at all",
			steps:   []pullStep{{stall: true}},
			wantErr: []string{testPullRef, noProgress, `(last: "no progress message yet")`},
		},
		{
			name: "steady progress outlasting the deadline",
			steps: func() []pullStep {
				var s []pullStep
				for i := int64(1); i <= 15; i++ { // 3.75 deadlines in all, a message every quarter
					s = append(s, status("abc123", "Downloading", i*1_000_000, 20_000_000), pullStep{pause: deadline / 4})
				}
				return append(s, status("", "Status: Downloaded newer image for "+testPullRef, 0, 0))
			}(),
		},
		{
			// A big layer extracts for longer than the deadline without a message: not cancelled.
			name: "extraction longer than the deadline",
			steps: []pullStep{
				downloading, status("abc123", "Download complete", 0, 0), status("abc123", "Extracting", 32_768, 20_000_000),
				{pause: 4 * deadline},
				status("def456", "Downloading", 5, 10), // another layer, after the first extracts
				{pause: 2 * deadline},
				status("abc123", "Pull complete", 0, 0), status("", "Status: Downloaded newer image for "+testPullRef, 0, 0),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint, clientGone, arrived := fakePullServer(t, tc.steps...)
			c, _ := testPullClient(t, endpoint, pullReportInterval)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.PullImage(ctx, testPullRef, registry.AuthConfig{}, deadline)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("PullImage: %v, want success", err)
				}
				return
			}
			if err == nil {
				t.Fatal("PullImage succeeded, want the deadline to cancel it")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("PullImage ran into the test's own timeout: %v", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			select {
			case <-clientGone: // the request to Docker was cancelled, so Docker stops the pull
			case <-time.After(testutil.Scaled(10 * time.Second)):
				select {
				case <-arrived:
					t.Error("the pull's request to Docker was not cancelled")
				default:
					// On a loaded machine the deadline can pass before the request is sent (the
					// client pings Docker first): cancelled before Docker saw it, nothing to stop.
					t.Log("the deadline passed before the pull's request reached Docker")
				}
			}
		})
	}
}

func TestPullImageLogsProgress(t *testing.T) {
	const wantProgress = "Pulling image example.com/app:1: abc123: Downloading 1MB/20MB"
	var hook *logtest.Hook
	logged := func(level logrus.Level, msg string) bool {
		for _, e := range hook.AllEntries() {
			if e.Level == level && e.Message == msg {
				return true
			}
		}
		return false
	}
	endpoint, _, _ := fakePullServer(t,
		status("abc123", "Downloading", 1_000_000, 20_000_000),
		pullStep{until: func() bool { return logged(logrus.InfoLevel, wantProgress) }},
		status("", "Status: Downloaded newer image for "+testPullRef, 0, 0),
	)
	var c *client
	c, hook = testPullClient(t, endpoint, 20*time.Millisecond)
	if err := c.PullImage(context.Background(), testPullRef, registry.AuthConfig{}, 0); err != nil {
		t.Fatal(err)
	}
	all := messages(hook.AllEntries())
	if !logged(logrus.InfoLevel, wantProgress) {
		t.Errorf("no periodic line %q in %v", wantProgress, all)
	}
	// Last, once: nothing is logged after the pull returned.
	if last := hook.LastEntry(); last == nil || last.Level != logrus.InfoLevel || last.Message != "Stop pulling image example.com/app:1: Status: Downloaded newer image for example.com/app:1" {
		t.Errorf("want the final line last, got %v", all)
	}
	time.Sleep(100 * time.Millisecond) // five intervals
	if n := len(hook.AllEntries()); n != len(all) {
		t.Errorf("logged after the pull ended: %v", messages(hook.AllEntries())[len(all):])
	}
}

func TestPullImageLogsFailure(t *testing.T) {
	endpoint, _, _ := fakePullServer(t, status("abc123", "Downloading", 1_000_000, 20_000_000), pullStep{stall: true})
	c, hook := testPullClient(t, endpoint, pullReportInterval)
	err := c.PullImage(context.Background(), testPullRef, registry.AuthConfig{}, 100*time.Millisecond)
	if err == nil {
		t.Fatal("PullImage succeeded")
	}
	last := hook.LastEntry()
	if last == nil || last.Level != logrus.WarnLevel || last.Message != "Stop pulling image example.com/app:1: abc123: Downloading 1MB/20MB" || last.Data[logrus.ErrorKey] == nil {
		t.Errorf("last log entry %+v, want a warning with the last progress and the error", last)
	}
}

func messages(entries []*logrus.Entry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Level.String()+": "+e.Message)
	}
	return out
}

func TestFormatProgress(t *testing.T) {
	for _, tc := range []struct {
		msg  *jsonmessage.JSONMessage
		want string
	}{
		{nil, "no progress message yet"},
		{&jsonmessage.JSONMessage{Status: "Pulling from library/busybox", ID: "latest"}, "latest: Pulling from library/busybox"},
		{&jsonmessage.JSONMessage{Status: "Downloading", ID: "abc123", Progress: &jsonmessage.JSONProgress{Current: 1_000_000, Total: 20_000_000}}, "abc123: Downloading 1MB/20MB"},
		{&jsonmessage.JSONMessage{Status: "Extracting", ID: "abc123", Progress: &jsonmessage.JSONProgress{Current: 3, Units: "s"}}, "abc123: Extracting 3 s"},
		{&jsonmessage.JSONMessage{Status: "Pull complete", ID: "abc123", Progress: &jsonmessage.JSONProgress{HideCounts: true}}, "abc123: Pull complete"},
		{&jsonmessage.JSONMessage{Status: "Digest: sha256:0123"}, "Digest: sha256:0123"},
	} {
		if got := formatProgress(tc.msg); got != tc.want {
			t.Errorf("formatProgress(%+v) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// Credentials go to Docker in the X-Registry-Auth header; a pull without them sends none.
func TestPullImageSendsCredentialsOnlyWhenGiven(t *testing.T) {
	var got []string
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/_ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		_, _ = io.WriteString(w, "OK")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Registry-Auth"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "Status: Image is up to date for " + testPullRef})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, _ := testPullClient(t, "tcp://"+srv.Listener.Addr().String(), pullReportInterval)
	if err := c.PullImage(context.Background(), testPullRef, registry.AuthConfig{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.PullImage(context.Background(), testPullRef, registry.AuthConfig{Username: "user", Password: "secret"}, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "" {
		t.Fatalf("X-Registry-Auth headers %q, want none for the pull without credentials", got)
	}
	raw, err := base64.URLEncoding.DecodeString(got[1])
	var auth registry.AuthConfig
	if err != nil || json.Unmarshal(raw, &auth) != nil || auth.Username != "user" || auth.Password != "secret" {
		t.Errorf("X-Registry-Auth %q (%s, %v): want the credentials", got[1], raw, err)
	}
}
