package libdocker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	timetypes "github.com/docker/docker/api/types/time"
	"github.com/docker/docker/pkg/stdcopy"
)

// fakeLogMessage is one message of a container's log, as Docker's json-file driver keeps it:
// a line with its newline, or a partial line without.
type fakeLogMessage struct {
	at     time.Time
	stderr bool
	data   string
}

// notify wakes the followers of the container's log; f.mu must be held.
func (c *fakeContainer) notify() {
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// fakeLogBufSize is the size at which Docker's log copier splits a line (daemon/logger's
// defaultBufSize, used by json-file, local and journald).
const fakeLogBufSize = 16 << 10

// WriteLog appends output of a container, as its process would write it: each line becomes a
// message; a last piece without a newline becomes a partial message. As Docker's log copier
// does, a line of 16 KiB or more is split into partial messages of 16 KiB, the last part
// (with the newline) a message of its own, and all the parts of one line carry the time of
// the first.
func (f *Fake) WriteLog(idOrName string, stderr bool, data string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupContainer(idOrName)
	if err != nil {
		return err
	}
	for data != "" {
		line := data
		if i := strings.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		// Docker's timestamps are strictly increasing per container in practice; keep them so.
		at := time.Now().UTC()
		if n := len(c.logs); n > 0 && !at.After(c.logs[n-1].at) {
			at = c.logs[n-1].at.Add(time.Nanosecond)
		}
		for len(strings.TrimSuffix(line, "\n")) >= fakeLogBufSize {
			c.logs = append(c.logs, fakeLogMessage{at: at, stderr: stderr, data: line[:fakeLogBufSize]})
			line = line[fakeLogBufSize:]
		}
		if line != "" {
			c.logs = append(c.logs, fakeLogMessage{at: at, stderr: stderr, data: line})
		}
	}
	c.notify()
	return nil
}

// fakeTimestampFormat is Docker's stamp of a log message: nanoseconds always nine digits
// (jsonmessage.RFC3339NanoFixed).
const fakeTimestampFormat = "2006-01-02T15:04:05.000000000Z07:00"

// ContainerLogs streams the log as Docker does: multiplexed frames unless the container has a
// TTY, each message prefixed by its time when asked; Since skips older messages; Follow waits
// for more until the container stops or is removed.
func (f *Fake) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	f.mu.Lock()
	if err := f.enter(ctx, "ContainerLogs"); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	if c.changed == nil {
		c.notify()
	}
	f.mu.Unlock()
	var since time.Time
	if opts.Since != "" {
		ts, err := timetypes.GetTimestamp(opts.Since, time.Now())
		if err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid since: %v", err)
		}
		sec, nsec, err := timetypes.ParseTimestamps(ts, 0)
		if err != nil {
			return nil, dErr(cerrdefs.ErrInvalidArgument, "invalid since: %v", err)
		}
		since = time.Unix(sec, nsec)
	}
	pr, pw := io.Pipe()
	go func() {
		next := 0
		for {
			f.mu.Lock()
			msgs := c.logs[next:]
			next = len(c.logs)
			done := !opts.Follow || !c.resp.State.Running || c.removed
			wait := c.changed
			tty := c.resp.Config != nil && c.resp.Config.Tty
			f.mu.Unlock()
			var buf bytes.Buffer
			for _, m := range msgs {
				if m.at.Before(since) || (m.stderr && !opts.ShowStderr) || (!m.stderr && !opts.ShowStdout) {
					continue
				}
				payload := m.data
				if opts.Timestamps {
					payload = m.at.Format(fakeTimestampFormat) + " " + payload
				}
				switch {
				case tty:
					buf.WriteString(payload)
				case m.stderr:
					_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stderr).Write([]byte(payload))
				default:
					_, _ = stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write([]byte(payload))
				}
			}
			if buf.Len() > 0 {
				if _, err := pw.Write(buf.Bytes()); err != nil {
					return
				}
			}
			if done {
				pw.Close()
				return
			}
			select {
			case <-wait:
			case <-ctx.Done():
				pw.CloseWithError(fmt.Errorf("ContainerLogs: %w", ctx.Err()))
				return
			}
		}
	}()
	return pr, nil
}

// fakeLogOpts are the options Docker's json-file and local drivers accept.
var fakeLogOpts = map[string][]string{
	"json-file": {"max-file", "max-size", "compress", "labels", "labels-regex", "env", "env-regex", "tag"},
	"local":     {"max-file", "max-size", "compress"},
}

// mergeLogConfig completes a container's log config as Docker's daemon does at create: the
// daemon's driver when none is named, the daemon's options for the keys not set when the
// driver is the daemon's, and an unknown option refused.
func (f *Fake) mergeLogConfig(cfg *container.LogConfig) error {
	if cfg.Type == "" {
		cfg.Type = f.logConfig.Type
	}
	if cfg.Config == nil {
		cfg.Config = map[string]string{}
	}
	if cfg.Type == f.logConfig.Type {
		for k, v := range f.logConfig.Config {
			if _, ok := cfg.Config[k]; !ok {
				cfg.Config[k] = v
			}
		}
	}
	known, ok := fakeLogOpts[cfg.Type]
	if !ok {
		return nil // a driver the fake does not know: its options are not checked
	}
	for k := range cfg.Config {
		if slices.Contains(known, k) {
			continue
		}
		if cfg.Type == "local" {
			return dErr(cerrdefs.ErrInvalidArgument, "unknown log opt '%s' for log driver local", k)
		}
		return dErr(cerrdefs.ErrInvalidArgument, "unknown log opt '%s' for json-file log driver", k)
	}
	return nil
}

// fakeLogPath is where Docker keeps a container's log: json-file's file, local's, or none.
func fakeLogPath(driver, id string) string {
	dir := "/var/lib/docker/containers/" + id + "/"
	switch driver {
	case "json-file":
		return dir + id + "-json.log"
	case "local":
		return dir + "local-logs/container.log"
	}
	return ""
}
