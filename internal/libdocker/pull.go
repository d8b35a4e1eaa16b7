package libdocker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"
	units "github.com/docker/go-units"
	"github.com/sirupsen/logrus"
)

// pullReportInterval is how often a pull's latest progress is logged, as upstream cri-dockerd
// does (its defaultImagePullingProgressReportInterval).
const pullReportInterval = 10 * time.Second

// extractingStatus is the status Docker reports while a layer is unpacked, with either image
// store: from then on the pull is local work, which the progress deadline does not bound.
const extractingStatus = "Extracting"

// PullImage reads Docker's progress stream to its end: Docker reports pull failures inside the
// stream, not as an HTTP error. As upstream cri-dockerd's --image-pull-progress-deadline, the
// pull is cancelled when no progress message arrives for progressDeadline before the first
// layer extracts; a long extraction of a big layer is not cut short. The latest progress is
// logged every pullReportInterval and when the pull ends.
func (c *client) PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error {
	opts := image.PullOptions{}
	if auth != (registry.AuthConfig{}) {
		buf, err := json.Marshal(auth)
		if err != nil {
			return err
		}
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(buf)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watch starts before the request: Docker sends its response headers with the first
	// progress message, so a registry that never answers holds up ImagePull itself.
	w := watchPull(ref, progressDeadline, c.pullReportInterval, c.log, cancel)
	err := c.pull(ctx, ref, opts, w)
	w.stop(err)
	return err
}

// pull runs the pull and decodes its progress stream, handing each message to w.
func (c *client) pull(ctx context.Context, ref string, opts image.PullOptions, w *pullWatch) error {
	stream, err := c.api.ImagePull(ctx, ref, opts)
	if err != nil {
		return pullError(ctx, ref, classify(err))
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return pullError(ctx, ref, fmt.Errorf("pull %s: reading progress: %w", ref, err))
		}
		if msg.Error != nil {
			return classify(fmt.Errorf("pull %s: %w", ref, msg.Error))
		}
		w.observe(&msg)
	}
}

// pullError prefers why the pull's context ended (the progress deadline, the caller's
// cancellation) to the transport error that it caused.
func pullError(ctx context.Context, ref string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("pull %s: %w", ref, cause)
	}
	return err
}

// pullWatch follows one pull: it cancels the pull when the download phase stalls for the
// deadline (a timer reset by every message, stopped for good once a layer extracts), and logs
// the latest progress every interval.
type pullWatch struct {
	ref      string
	deadline time.Duration
	log      *logrus.Entry
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed by stop
	reported chan struct{} // closed when report returns

	mu     sync.Mutex
	last   *jsonmessage.JSONMessage
	lastAt time.Time // of the last message that was progress
	// seen is each layer's last progress text: the containerd image store repeats a stalled
	// layer's "Downloading 71B/142B" every few seconds, which is no progress.
	seen map[string]string
	// stall is nil without a deadline and once a layer extracts.
	stall *time.Timer
}

func watchPull(ref string, deadline, interval time.Duration, log *logrus.Entry, cancel context.CancelCauseFunc) *pullWatch {
	w := &pullWatch{ref: ref, deadline: deadline, log: log, cancel: cancel, done: make(chan struct{}), reported: make(chan struct{}), lastAt: time.Now(), seen: map[string]string{}}
	if deadline > 0 {
		w.mu.Lock() // stalled reads w.stall
		w.stall = time.AfterFunc(deadline, w.stalled)
		w.mu.Unlock()
	}
	go w.report(interval)
	return w
}

func (w *pullWatch) observe(msg *jsonmessage.JSONMessage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = msg
	text := formatProgress(msg)
	if w.seen[msg.ID] == text {
		return // the same news again
	}
	w.seen[msg.ID] = text
	w.lastAt = time.Now()
	if w.stall == nil {
		return
	}
	if msg.Status == extractingStatus {
		w.stall.Stop()
		w.stall = nil
		return
	}
	w.stall.Reset(w.deadline)
}

// stalled runs when the timer fires; a message that came in meanwhile has re-armed it.
func (w *pullWatch) stalled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stall == nil || time.Since(w.lastAt) < w.deadline {
		return
	}
	w.cancel(noProgressError(w.deadline, w.last))
}

func (w *pullWatch) report(interval time.Duration) {
	defer close(w.reported)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-ticker.C:
			w.log.Infof("Pulling image %s: %s", w.ref, w.progress())
		}
	}
}

func (w *pullWatch) progress() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return formatProgress(w.last)
}

// stop ends the watch and logs the pull's last progress with its outcome, as the last line.
func (w *pullWatch) stop(err error) {
	close(w.done)
	<-w.reported
	w.mu.Lock()
	if w.stall != nil {
		w.stall.Stop()
		w.stall = nil
	}
	w.mu.Unlock()
	if err != nil {
		w.log.WithError(err).Warnf("Stop pulling image %s: %s", w.ref, w.progress())
		return
	}
	w.log.Infof("Stop pulling image %s: %s", w.ref, w.progress())
}

// noProgressError says how long the pull stalled and where: the last message tells whether
// the registry, a layer or the auth step hung.
func noProgressError(deadline time.Duration, last *jsonmessage.JSONMessage) error {
	return fmt.Errorf("no pull progress for %s (last: %q)", deadline, formatProgress(last))
}

// formatProgress renders a progress message on one line ("abc123: Downloading 1MB/20MB"),
// without the terminal-width dependent bar of jsonmessage's Display.
func formatProgress(msg *jsonmessage.JSONMessage) string {
	if msg == nil {
		return "no progress message yet"
	}
	s := msg.Status
	if msg.ID != "" {
		s = msg.ID + ": " + s
	}
	if counts := progressCounts(msg.Progress); counts != "" {
		s += " " + counts
	}
	return s
}

func progressCounts(p *jsonmessage.JSONProgress) string {
	switch {
	case p == nil || p.HideCounts || (p.Current <= 0 && p.Total <= 0):
		return ""
	case p.Units != "" && p.Total > 0:
		return fmt.Sprintf("%d/%d %s", p.Current, p.Total, p.Units)
	case p.Units != "":
		return fmt.Sprintf("%d %s", p.Current, p.Units)
	case p.Total > 0:
		return units.HumanSize(float64(p.Current)) + "/" + units.HumanSize(float64(p.Total))
	}
	return units.HumanSize(float64(p.Current))
}
