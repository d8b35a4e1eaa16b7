package containerlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
)

// FuzzDecodeRecord: a position record's bytes never panic the decoder, and what decodes
// re-encodes (as saveRecord writes it) to bytes that decode to an equal position.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"time":"2024-05-01T10:00:00.123456789Z","count":3,"done":false}`))
	f.Add([]byte(`{"time":"2024-05-01T10:00:00+02:00","count":1,"done":true}`))
	f.Add([]byte(`{"time":"0001-01-01T00:00:00Z","count":0,"done":false}`))
	f.Add([]byte(`{"time":"2024-05-01T10:00:00Z","count":`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := decodeRecord(data)
		enc, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", p, data, err)
		}
		q := decodeRecord(enc)
		if !q.Time.Equal(p.Time) || q.Count != p.Count || q.Done != p.Done {
			t.Fatalf("%q decodes to %+v, re-encoded %s decodes to %+v", data, p, enc, q)
		}
	})
}

// streamDocker serves one log stream for any container.
type streamDocker struct{ data []byte }

func (d streamDocker) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(d.data)), nil
}

func (d streamDocker) InspectContainer(context.Context, string) (*container.InspectResponse, error) {
	return &container.InspectResponse{}, nil
}

// bufferFile is a log file in memory.
type bufferFile struct{ *bytes.Buffer }

func (bufferFile) Truncate(int64) error { return errors.New("not supported") }
func (bufferFile) Close() error         { return nil }

// writeFrame writes msg to a multiplexed log stream as Docker sends it for stream 1 (stdout)
// or 2 (stderr): an 8-byte header holding the stream and the length, then the message.
func writeFrame(w *bytes.Buffer, streamByte byte, msg []byte) {
	var h [8]byte
	h[0] = streamByte
	binary.BigEndian.PutUint32(h[4:], uint32(len(msg)))
	w.Write(h[:])
	w.Write(msg)
}

// FuzzCRILogWriter feeds the follower a Docker log stream made from the input — messages of
// stdout or stderr (multiplexed) or of a terminal, each with a timestamp and arbitrary
// content — and checks that every line written parses as `TIMESTAMP STREAM P|F TEXT` with a
// text no longer than the maximum line (maxLine; 0 is the default), and that per stream the
// texts of the lines (F lines with their newline) are the input.
func FuzzCRILogWriter(f *testing.F) {
	f.Add(false, []byte("\x01hello\n\x02oops\n\x01part\x01ial\n"), uint8(0))
	f.Add(false, []byte("\x01no newline"), uint8(0))
	f.Add(false, []byte("\x01a\nb\n\x02\n\x01\r\n"), uint8(0))
	f.Add(true, []byte("\x01line one\n\x01line two\n\x01tail"), uint8(0))
	f.Add(false, []byte("\x01"+strings.Repeat("x", 300)+"\n"), uint8(0))
	f.Add(false, []byte("\x01"+strings.Repeat("x", 300)+"\n\x02abcdef"), uint8(7))
	f.Add(true, []byte("\x01"+strings.Repeat("x", 300)+"\n\x01abcdefgh\n"), uint8(4))
	f.Fuzz(func(t *testing.T, tty bool, data []byte, maxLine uint8) {
		// The input is a sequence of messages, each a stream byte (2: stderr, else stdout)
		// and its content up to the next byte 0x01 or 0x02.
		var stream bytes.Buffer
		want := map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}
		last := map[string][]byte{}
		at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
		for len(data) > 0 {
			name := "stdout"
			if data[0] == 2 {
				name = "stderr"
			}
			kind := data[0]
			data = data[1:]
			end := bytes.IndexAny(data, "\x01\x02")
			if end < 0 {
				end = len(data)
			}
			content := data[:end]
			data = data[end:]
			if tty {
				// A terminal's stream is lines: a message is one, its content has no newline
				// but the last byte.
				name = "stdout"
				content = bytes.ReplaceAll(bytes.TrimSuffix(content, []byte("\n")), []byte("\n"), nil)
				content = append(content, '\n')
			}
			// Some share a stamp, as Docker's parts of a long line do; but Docker never sends
			// one whole line twice with one stamp (the follower takes that for a repeat).
			step := time.Duration(len(content)%3) * time.Nanosecond
			if step == 0 && bytes.Equal(content, last[name]) && bytes.HasSuffix(content, []byte("\n")) {
				step = time.Nanosecond
			}
			at = at.Add(step)
			last[name] = content
			msg := append([]byte(at.Format(time.RFC3339Nano)+" "), content...)
			if tty {
				stream.Write(msg)
			} else {
				streamByte := byte(1)
				if kind == 2 {
					streamByte = 2
				}
				writeFrame(&stream, streamByte, msg)
			}
			want[name].Write(content)
		}
		var out bytes.Buffer
		fl := &follower{
			m:        &Manager{docker: streamDocker{stream.Bytes()}, log: logrus.NewEntry(logrus.New()), MaxLineSize: int(maxLine)},
			id:       "c",
			tty:      tty,
			file:     bufferFile{&out},
			recorded: time.Now().Add(time.Hour), // no record saved
		}
		if err := fl.copyStream(context.Background(), false); err != io.EOF && err != io.ErrUnexpectedEOF {
			t.Fatalf("copyStream: %v", err)
		}
		if err := fl.flush(); err != nil {
			t.Fatalf("flush: %v", err)
		}
		got := map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}
		text := out.Bytes()
		if len(text) > 0 && text[len(text)-1] != '\n' {
			t.Fatalf("output does not end with a newline: %q", text)
		}
		for _, line := range bytes.SplitAfter(text, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			fields := bytes.SplitN(bytes.TrimSuffix(line, []byte("\n")), []byte(" "), 4)
			if len(fields) != 4 {
				t.Fatalf("line %q: not TIMESTAMP STREAM TAG TEXT", line)
			}
			if _, err := time.Parse(time.RFC3339Nano, string(fields[0])); err != nil {
				t.Fatalf("line %q: timestamp: %v", line, err)
			}
			if maxLine > 0 && len(fields[3]) > int(maxLine) {
				t.Fatalf("line %q: longer than %d", line, maxLine)
			}
			buf, ok := got[string(fields[1])]
			if !ok {
				t.Fatalf("line %q: stream %q", line, fields[1])
			}
			switch string(fields[2]) {
			case "P":
				buf.Write(fields[3])
			case "F":
				buf.Write(fields[3])
				buf.WriteByte('\n')
			default:
				t.Fatalf("line %q: tag %q", line, fields[2])
			}
		}
		for name := range want {
			if !bytes.Equal(got[name].Bytes(), want[name].Bytes()) {
				t.Fatalf("%s: wrote %q, want %q\noutput:\n%s", name, got[name], want[name], text)
			}
		}
	})
}
