package libdocker

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// fakeLogFrame is one message of a multiplexed log stream.
type fakeLogFrame struct {
	stream byte
	stamp  string
	data   string
}

func readFrames(t *testing.T, r io.Reader) []fakeLogFrame {
	t.Helper()
	br := bufio.NewReader(r)
	var out []fakeLogFrame
	for {
		var h [8]byte
		if _, err := io.ReadFull(br, h[:]); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(h[4:]))
		if _, err := io.ReadFull(br, payload); err != nil {
			t.Fatal(err)
		}
		stamp, data, _ := strings.Cut(string(payload), " ")
		out = append(out, fakeLogFrame{h[0], stamp, data})
	}
}

// Docker's log copier splits a line at 16 KiB: partial messages without a newline, the rest
// (with it) a message of its own, every part stamped with the time of the first.
func TestFakeLogSplitsLongLinesAsDocker(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	id := mustCreate(t, f, "logs", nil, "")
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 40000)
	exact := strings.Repeat("b", 16384)
	if err := f.WriteLog(id, false, "\nshort\n"+long+"\n"+exact+"\n"+"tail"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteLog(id, true, strings.Repeat("c", 16385)); err != nil {
		t.Fatal(err)
	}
	rc, err := f.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	frames := readFrames(t, rc)
	want := []struct {
		stream byte
		data   string
		group  int // frames of one group share a stamp; groups are strictly increasing
	}{
		{1, "\n", -1}, // a blank line is a message of its own
		{1, "short\n", 0},
		{1, long[:16384], 1}, {1, long[16384:32768], 1}, {1, long[32768:] + "\n", 1},
		{1, exact, 2}, {1, "\n", 2},
		{1, "tail", 3},
		{2, strings.Repeat("c", 16384), 4}, {2, "c", 4},
	}
	if len(frames) != len(want) {
		t.Fatalf("%d messages, want %d", len(frames), len(want))
	}
	for i, w := range want {
		got := frames[i]
		if got.stream != w.stream || got.data != w.data {
			t.Errorf("message %d: stream %d, %d bytes %.20q; want stream %d, %d bytes %.20q", i, got.stream, len(got.data), got.data, w.stream, len(w.data), w.data)
		}
		if len(got.stamp) != len("2006-01-02T15:04:05.000000000Z") {
			t.Errorf("message %d: stamp %q is not Docker's fixed nanosecond format", i, got.stamp)
		}
		if i == 0 {
			continue
		}
		same := w.group == want[i-1].group
		if prev := frames[i-1].stamp; same != (got.stamp == prev) || !same && got.stamp <= prev {
			t.Errorf("message %d: stamp %s after %s; the parts of one line share a stamp, lines have increasing ones", i, got.stamp, prev)
		}
	}
}

func TestOnCallRunsBeforeTheContextIsChecked(t *testing.T) {
	f := newTestFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.OnCall("Ping", cancel)
	if err := f.Ping(ctx); err == nil || ctx.Err() == nil {
		t.Fatalf("Ping with a hook that cancels: %v (context %v), want the context's error", err, ctx.Err())
	}
	f.OnCall("Ping", nil)
	if err := f.Ping(context.Background()); err != nil {
		t.Errorf("after the hook is removed: %v", err)
	}
}
