package containerlog

import (
	"bytes"
	"context"
	"errors"

	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
)

// messages reads every message of a stream, as copies.
func messages(t *testing.T, stream io.Reader, tty bool, max int) []string {
	t.Helper()
	r := newMessageReader(stream, tty, max)
	var got []string
	for {
		name, msg, err := r.next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if tty && name != "stdout" {
			t.Errorf("a terminal's message on %q, want stdout", name)
		}
		got = append(got, string(msg))
	}
}

// A terminal's log line is cut into messages only where its whole stamp and the space after it
// come again (Docker's parts of a line of 16 KiB or more): output that merely holds the stamp's
// digits stays in its message.
func TestTerminalLineIsCutOnlyAtItsWholeStamp(t *testing.T) {
	const stamp = "2026-12-01T10:00:00.5Z"
	stream := stamp + " said 2026-12-01T10:00:00.5 at noon\n" + stamp + " part1" + stamp + " part2\n"
	got := messages(t, strings.NewReader(stream), true, 0)
	want := []string{stamp + " said 2026-12-01T10:00:00.5 at noon\n", stamp + " part1", stamp + " part2\n"}
	if !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
}

// A message longer than the maximum is cut into pieces of the maximum, each with the message's
// stamp; the newline stays with the line's last piece, and a line of exactly the maximum ends
// in an empty piece with the newline, as Docker cuts its own parts.
func TestLongMessagesAreCutAtTheMaximum(t *testing.T) {
	const stamp = "2026-12-01T10:00:00.5Z "
	for _, tty := range []bool{true, false} {
		var stream bytes.Buffer
		add := func(text string) {
			if tty {
				stream.WriteString(stamp + text)
			} else {
				writeFrame(&stream, 1, []byte(stamp+text))
			}
		}
		add("abcdefghij\n") // 10: cut into 4, 4, 2
		add("abcd\n")       // exactly the maximum
		add("abc\n")
		add("abcdefghi") // a part that goes on in the next message
		add("xy\n")
		got := messages(t, &stream, tty, 4)
		want := []string{"abcd", "efgh", "ij\n", "abcd", "\n", "abc\n", "abcd", "efgh", "i", "xy\n"}
		for i := range want {
			want[i] = stamp + want[i]
		}
		if !slices.Equal(got, want) {
			t.Errorf("tty %v: messages\n %q, want\n %q", tty, got, want)
		}
	}
}

// Where a stream is cut depends on its bytes only, not on how they arrive: a follower that
// reads it again after a restart counts the same pieces. And the pieces' texts are the
// stream's, in order, none longer than the maximum.
func TestCutsDoNotDependOnHowTheStreamArrives(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stamps := []string{"2026-12-01T10:00:00.5Z ", "2026-12-01T10:00:01.25Z "}
	for round := 0; round < 200; round++ {
		tty := round%2 == 0
		max := 1 + rng.IntN(40)
		var stream bytes.Buffer
		var text strings.Builder
		stamp := stamps[0]
		for n := rng.IntN(8); n > 0; n-- {
			if !tty || strings.HasSuffix(text.String(), "\n") {
				// A terminal's line goes on in parts with its first part's stamp.
				stamp = stamps[rng.IntN(len(stamps))]
			}
			var msg []byte
			for l := rng.IntN(3 * max); l > 0; l-- {
				msg = append(msg, "ab 2\n"[rng.IntN(4)]) // no newline inside...
			}
			if rng.IntN(2) == 0 {
				msg = append(msg, '\n') // ... but at the end of a line
			}
			text.Write(msg)
			if tty {
				stream.WriteString(stamp)
				stream.Write(msg)
			} else {
				writeFrame(&stream, 1, append([]byte(stamp), msg...))
			}
		}
		whole := messages(t, bytes.NewReader(stream.Bytes()), tty, max)
		for _, slow := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader} {
			if got := messages(t, slow(bytes.NewReader(stream.Bytes())), tty, max); !slices.Equal(got, whole) {
				t.Fatalf("tty %v, max %d, stream %q: read whole %q, read slowly %q", tty, max, stream.Bytes(), whole, got)
			}
		}
		var got strings.Builder
		for _, m := range whole {
			_, body, _ := strings.Cut(m, " ")
			if len(strings.TrimSuffix(body, "\n")) > max {
				t.Fatalf("max %d: message %q is longer", max, m)
			}
			got.WriteString(body)
		}
		if got.String() != text.String() {
			t.Fatalf("tty %v, max %d: texts %q, want %q", tty, max, got.String(), text.String())
		}
	}
}

// endlessLine is a terminal's stream of one line that never ends: a stamp, then size bytes of
// x. It notes the most heap in use while it is read.
type endlessLine struct {
	head     string
	size     int64
	read     int64
	nextLook int64
	peak     uint64
}

func (e *endlessLine) Read(p []byte) (int, error) {
	if e.read >= e.nextLook {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		e.peak = max(e.peak, ms.HeapInuse)
		e.nextLook += 32 << 20
	}
	if e.head != "" {
		n := copy(p, e.head)
		e.head = e.head[n:]
		return n, nil
	}
	if e.read >= e.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), e.size-e.read))
	for i := range p[:n] {
		p[i] = 'x'
	}
	e.read += int64(n)
	return n, nil
}

// countingFile is a log file that only counts what is written to it, and its lines.
type countingFile struct{ bytes, partial, full int64 }

func (c *countingFile) Write(p []byte) (int, error) {
	c.bytes += int64(len(p))
	c.partial += int64(bytes.Count(p, []byte(" P ")))
	c.full += int64(bytes.Count(p, []byte(" F ")))
	return len(p), nil
}
func (c *countingFile) Truncate(int64) error { return errors.New("not supported") }
func (c *countingFile) Close() error         { return nil }

// A terminal that writes 1 GiB without a newline costs the follower no more memory than a
// short line: the line reaches the file as partial lines of the maximum, as it comes.
func TestEndlessTerminalLineKeepsMemoryFlat(t *testing.T) {
	const size = 1 << 30
	stream := &endlessLine{head: "2026-12-01T10:00:00.5Z ", size: size}
	file := &countingFile{}
	f := &follower{
		m:        &Manager{docker: readerDocker{stream}, log: logrus.NewEntry(logrus.New())},
		id:       "c",
		tty:      true,
		file:     file,
		recorded: time.Now().Add(time.Hour), // no record saved
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := f.copyStream(context.Background(), false); !errors.Is(err, io.EOF) {
		t.Fatalf("copyStream: %v", err)
	}
	if err := f.flush(); err != nil {
		t.Fatal(err)
	}
	if want := int64(size / DefaultMaxLineSize); file.partial != want || file.full != 0 {
		t.Errorf("wrote %d partial and %d full lines, want %d partial", file.partial, file.full, want)
	}
	// The follower's own buffers are some 100 KiB; a read that gathers the line grows by GiBs.
	if grew := int64(stream.peak) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB while 1 GiB without a newline was read", grew>>20)
	}
	t.Logf("heap in use: %d MiB before, at most %d MiB while 1 GiB was read; %d MiB written", before.HeapInuse>>20, stream.peak>>20, file.bytes>>20)
}

// readerDocker serves one stream, once.
type readerDocker struct{ r io.Reader }

func (d readerDocker) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return io.NopCloser(d.r), nil
}

func (d readerDocker) InspectContainer(context.Context, string) (*container.InspectResponse, error) {
	return &container.InspectResponse{}, nil
}
