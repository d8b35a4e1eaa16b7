package containerlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// tinyFS stands for a filesystem with room for limit bytes per file: a write past it writes
// what fits and fails with ENOSPC, as on a full tmpfs.
type tinyFS struct {
	limit    atomic.Int64
	failures atomic.Int64
}

func (fs *tinyFS) open(path string) (logFile, int64, error) {
	f, size, err := openLogFile(path)
	if err != nil {
		return nil, 0, err
	}
	return &tinyFile{File: f.(*os.File), fs: fs}, size, nil
}

type tinyFile struct {
	*os.File
	fs *tinyFS
}

func (f *tinyFile) Write(p []byte) (int, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	room := max(f.fs.limit.Load()-fi.Size(), 0)
	if int64(len(p)) <= room {
		return f.File.Write(p)
	}
	n, _ := f.File.Write(p[:room])
	f.fs.failures.Add(1)
	return n, syscall.ENOSPC
}

// waitFailures waits until the filesystem has refused at least n writes.
func (fs *tinyFS) waitFailures(t *testing.T, n int64) {
	t.Helper()
	if !testutil.PollUntil(30*time.Second, 5*time.Millisecond, func() bool { return fs.failures.Load() >= n }) {
		t.Fatalf("%d failed writes, want %d", fs.failures.Load(), n)
	}
}

// fullManager is a manager whose log files are on fs, logging to hook.
func fullManager(t *testing.T, fake *libdocker.Fake, state string, fs *tinyFS) (*Manager, *test.Hook) {
	t.Helper()
	logger, hook := test.NewNullLogger()
	m, err := NewManager(fake, state, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	m.openFile = fs.open
	t.Cleanup(m.Close)
	return m, hook
}

// writeWarnings are the warnings of failed writes in hook.
func writeWarnings(hook *test.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "no space left") {
			out = append(out, e.Message)
		}
	}
	return out
}

// checkWholeLines fails unless every line of the file is a whole CRI line and the file ends
// with a newline; it returns the lines' contents.
func checkWholeLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s ends with a cut line: %q", path, data[max(len(data)-60, 0):])
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		_, _, tag, content := fields(t, line)
		out = append(out, tag+" "+content)
	}
	return out
}

// On a full filesystem the follower drops what it could not write and copies it again from
// Docker once there is room: every line once, in order, none cut or joined to another, and the
// position record, across a restart while the filesystem is full, counts only what is in the
// file.
func TestFullFilesystemLosesNoLineAndCutsNone(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	fs := &tinyFS{}
	fs.limit.Store(30000) // 70 lines and one part of the long line
	var want []string
	write := func(from, to int) {
		for i := from; i < to; i++ {
			line := fmt.Sprintf("n=%d", i)
			if i == 70 { // a line of three parts sharing one stamp, across the limit
				long := strings.Repeat("x", 40000)
				want = append(want, "P "+long[:16384], "P "+long[16384:32768], "F "+long[32768:]+line)
				line = long + line
			} else {
				want = append(want, "F "+line)
			}
			if err := fake.WriteLog(id, false, line+"\n"); err != nil {
				t.Fatal(err)
			}
		}
	}

	first, hook := fullManager(t, fake, state, fs)
	first.Follow(id, path, false)
	write(0, 200)
	fs.waitFailures(t, 1)
	write(200, 300) // while the filesystem is full
	fs.waitFailures(t, 3)
	first.Close()
	got := checkWholeLines(t, path)
	if len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("%d lines in the full file, want some of %d", len(got), len(want))
	}
	if warnings := writeWarnings(hook); len(warnings) != 1 || !strings.Contains(warnings[0], "lines not written") {
		t.Errorf("%d failed writes gave the warnings %q, want one that counts the lines not written", fs.failures.Load(), warnings)
	}
	rec := loadRecord(first.recordPath(id))
	inFile, _, err := filePosition(path)
	if err != nil || !rec.Time.Equal(inFile.Time) || rec.Count != inFile.Count {
		t.Errorf("record %+v after Close, the file ends at %+v (%v): the record must count only what is in the file", rec, inFile, err)
	}

	// Started again while still full, then the space comes back.
	second, _ := fullManager(t, fake, state, fs)
	second.Follow(id, path, false)
	fs.waitFailures(t, fs.failures.Load()+1)
	fs.limit.Store(1 << 30)
	write(300, 400)
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second.Drained(ctx, id)
	got = checkWholeLines(t, path)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after the space came back the file has %d lines, want the %d written, in order, once each", len(got), len(want))
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Errorf("first difference at line %d: %.60q, want %.60q", i, got[i], want[i])
				break
			}
		}
	}
	if rec := loadRecord(second.recordPath(id)); !rec.Done {
		t.Errorf("record %+v after the exit, want done", rec)
	}
}

// A rotation while the old file cannot be written loses nothing: what did not reach the old
// file goes to the new one.
func TestReopenOnAFullFilesystemLosesNoLine(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	path := filepath.Join(t.TempDir(), "0.log")
	fs := &tinyFS{}
	fs.limit.Store(2000)
	m, _ := fullManager(t, fake, t.TempDir(), fs)
	m.Follow(id, path, false)
	for i := range 100 {
		if err := fake.WriteLog(id, false, fmt.Sprintf("n=%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	fs.waitFailures(t, 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Reopen(id); err != nil {
		t.Fatal(err)
	}
	fs.limit.Store(1 << 30)
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Drained(ctx, id)
	got := append(checkWholeLines(t, path+".1"), checkWholeLines(t, path)...)
	for i := range 100 {
		if i >= len(got) || got[i] != fmt.Sprintf("F n=%d", i) {
			t.Fatalf("the two files hold %d lines, want n=0..99 once each, in order: %q", len(got), got)
		}
	}
	if len(got) != 100 {
		t.Errorf("%d lines, want 100", len(got))
	}
}

// A file that ends with a cut line (a crash in the middle of a write) is cut back to its last
// whole line when it is opened: the next line is not joined to the fragment.
func TestOpenCutsOffATornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	whole := "2024-05-01T10:00:00.000000001Z stdout F n=1\n"
	if err := os.WriteFile(path, []byte(whole+"2024-05-01T10:00:00.000000002Z stdout F 2"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, size, err := openLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if size != int64(len(whole)) {
		t.Errorf("size %d, want %d", size, len(whole))
	}
	if data, _ := os.ReadFile(path); string(data) != whole {
		t.Errorf("file after open %q, want %q", data, whole)
	}
}

// A whole line Docker sends twice in a row, same stamp and stream, or a run of lines it sends
// again after later ones, is written once; the parts of a long line, which share a stamp and
// may be equal, are all written; so are equal lines with stamps of their own, and a stderr
// line stamped before the stdout line sent ahead of it (each stream is stamped apart).
func TestLinesDockerSendsAgainAreWrittenOnce(t *testing.T) {
	var stream bytes.Buffer
	frame := func(streamByte byte, msg string) { writeFrame(&stream, streamByte, []byte(msg)) }
	frame(1, "2024-05-01T10:00:00.000000001Z n=1\n")
	frame(1, "2024-05-01T10:00:00.000000002Z n=2\n")
	frame(1, "2024-05-01T10:00:00.000000002Z n=2\n")
	frame(1, "2024-05-01T10:00:00.000000003Z xx")
	frame(1, "2024-05-01T10:00:00.000000003Z xx")
	frame(1, "2024-05-01T10:00:00.000000003Z x\n")
	frame(1, "2024-05-01T10:00:00.000000004Z n=4\n")
	frame(1, "2024-05-01T10:00:00.000000001Z n=1\n")
	frame(1, "2024-05-01T10:00:00.000000002Z n=2\n")
	frame(1, "2024-05-01T10:00:00.000000005Z n=5\n")
	frame(1, "2024-05-01T10:00:00.000000006Z .\n")
	frame(1, "2024-05-01T10:00:00.000000007Z .\n")
	frame(2, "2024-05-01T10:00:00.000000006Z e=6\n")
	frame(2, "2024-05-01T10:00:00.000000006Z e=6\n")
	var out bytes.Buffer
	fl := &follower{
		m:        &Manager{docker: streamDocker{stream.Bytes()}, log: logrus.NewEntry(logrus.New())},
		id:       "c",
		file:     bufferFile{&out},
		recorded: time.Now().Add(time.Hour), // no record saved
	}
	if err := fl.copyStream(context.Background(), false); err != io.EOF {
		t.Fatalf("copyStream: %v", err)
	}
	if err := fl.flush(); err != nil {
		t.Fatal(err)
	}
	want := "2024-05-01T10:00:00.000000001Z stdout F n=1\n" +
		"2024-05-01T10:00:00.000000002Z stdout F n=2\n" +
		"2024-05-01T10:00:00.000000003Z stdout P xx\n" +
		"2024-05-01T10:00:00.000000003Z stdout P xx\n" +
		"2024-05-01T10:00:00.000000003Z stdout F x\n" +
		"2024-05-01T10:00:00.000000004Z stdout F n=4\n" +
		"2024-05-01T10:00:00.000000005Z stdout F n=5\n" +
		"2024-05-01T10:00:00.000000006Z stdout F .\n" +
		"2024-05-01T10:00:00.000000007Z stdout F .\n" +
		"2024-05-01T10:00:00.000000006Z stderr F e=6\n"
	if out.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// WriteFailed hears of every write to the file that failed, and of no other.
func TestWriteFailedIsToldOfEachFailedWrite(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	fs := &tinyFS{}
	fs.limit.Store(200) // a few lines
	m, _ := fullManager(t, fake, t.TempDir(), fs)
	var told atomic.Int64
	m.WriteFailed = func() { told.Add(1) }
	m.Follow(id, filepath.Join(t.TempDir(), "0.log"), false)
	for i := range 50 {
		if err := fake.WriteLog(id, false, fmt.Sprintf("line %d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	fs.waitFailures(t, 2)
	m.Close()
	if told.Load() != fs.failures.Load() {
		t.Errorf("WriteFailed was told of %d failed writes, the filesystem refused %d", told.Load(), fs.failures.Load())
	}
}
