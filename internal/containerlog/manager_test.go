package containerlog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// runningContainer starts a container in the fake and returns its ID.
func runningContainer(t *testing.T, fake *libdocker.Fake, tty bool) string {
	t.Helper()
	fake.AddImage(libdocker.FakeImage("", "", "busybox:latest"))
	return testutil.RunningContainer(t, fake, fmt.Sprintf("c%d", time.Now().UnixNano()), &container.Config{Image: "busybox", Tty: tty}, nil)
}

func newManager(t *testing.T, fake *libdocker.Fake, stateDir string) *Manager {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	m, err := NewManager(fake, stateDir, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// waitLines waits until the file holds n lines and returns them.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	if !testutil.PollUntil(5*time.Second, 5*time.Millisecond, func() bool {
		data, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		return len(data) > 0 && len(lines) >= n
	}) {
		t.Fatalf("%s: %d lines, want %d: %q", path, len(lines), n, lines)
	}
	return lines
}

// fields splits a CRI log line into time, stream, tag and content.
func fields(t *testing.T, line string) (time.Time, string, string, string) {
	t.Helper()
	parts := strings.SplitN(line, " ", 4)
	if len(parts) != 4 {
		t.Fatalf("not a CRI log line: %q", line)
	}
	at, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return at, parts[1], parts[2], parts[3]
}

func TestLinesAreWrittenInCRIFormatWithStreamsAndPartialTags(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	// The kubelet creates the pod's log directory; the follower creates the container's.
	podDir := filepath.Join(t.TempDir(), "pod")
	if err := os.Mkdir(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(podDir, "c", "0.log")
	m := newManager(t, fake, t.TempDir())
	m.Follow(id, path, false)
	fake.WriteLog(id, false, "hello\n")
	fake.WriteLog(id, true, "oops\n")
	fake.WriteLog(id, false, "no newline yet")
	lines := waitLines(t, path, 3)
	want := [][3]string{{"stdout", "F", "hello"}, {"stderr", "F", "oops"}, {"stdout", "P", "no newline yet"}}
	var last time.Time
	for i, line := range lines {
		at, stream, tag, content := fields(t, line)
		if stream != want[i][0] || tag != want[i][1] || content != want[i][2] {
			t.Errorf("line %d = %q, want %v", i, line, want[i])
		}
		if at.Before(last) {
			t.Errorf("line %d goes back in time", i)
		}
		last = at
	}
}

func TestTTYOutputIsOneStdoutStream(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, true)
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, "")
	m.Follow(id, path, true)
	fake.WriteLog(id, false, "line one\r\n")
	fake.WriteLog(id, false, "line two\r\n")
	for i, line := range waitLines(t, path, 2) {
		_, stream, tag, content := fields(t, line)
		if stream != "stdout" || tag != "F" || !strings.HasPrefix(content, "line ") {
			t.Errorf("line %d = %q", i, line)
		}
	}
}

func TestRestartResumesWithoutLossOrDuplicates(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	dir, state := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "0.log")
	write := func(from, to int) {
		for i := from; i < to; i++ {
			fake.WriteLog(id, i%3 == 0, fmt.Sprintf("n=%d\n", i))
		}
	}
	first := newManager(t, fake, state)
	first.Follow(id, path, false)
	write(0, 50)
	waitLines(t, path, 50)
	first.Close()
	write(50, 100) // while cri-dockerd is down

	second := newManager(t, fake, state)
	second.Follow(id, path, false)
	write(100, 120)
	// Rotation: the kubelet renames the file and asks for a new one.
	waitLines(t, path, 120)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := second.Reopen(id); err != nil {
		t.Fatal(err)
	}
	write(120, 130)
	waitLines(t, path, 10)
	second.Close()
	write(130, 140)

	// A restart right after a rotation: the new file's end and the record agree.
	third := newManager(t, fake, state)
	third.Follow(id, path, false)
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	third.Drained(ctx, id)

	seen := map[string]int{}
	for _, p := range []string{path + ".1", path} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			_, _, _, content := fields(t, line)
			seen[content]++
		}
	}
	for i := 0; i < 140; i++ {
		if n := seen[fmt.Sprintf("n=%d", i)]; n != 1 {
			t.Errorf("n=%d appears %d times", i, n)
		}
	}
	if len(seen) != 140 {
		t.Errorf("%d distinct lines, want 140", len(seen))
	}
}

func TestDrainedWaitsForTheLastLinesOfAnExitedContainer(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, t.TempDir())
	m.Follow(id, path, false)
	for i := 0; i < 200; i++ {
		fake.WriteLog(id, false, fmt.Sprintf("line %d\n", i))
	}
	if err := fake.ExitContainer(id, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Drained(ctx, id)
	data, _ := os.ReadFile(path)
	if n := strings.Count(string(data), "\n"); n != 200 {
		t.Errorf("after Drained the file has %d lines, want all 200", n)
	}
	if err := m.Reopen(id); err != ErrNotFollowed {
		t.Errorf("Reopen after exit: %v, want ErrNotFollowed", err)
	}
	// The log is complete: the record says so, and a restart has nothing to follow.
	if rec := loadRecord(m.recordPath(id)); !rec.Done {
		t.Errorf("record after the exit %+v, want done", rec)
	}
}

func TestForgetDropsThePositionRecord(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	m := newManager(t, fake, state)
	path := filepath.Join(t.TempDir(), "0.log")
	m.Follow(id, path, false)
	fake.WriteLog(id, false, "x\n")
	waitLines(t, path, 1)
	m.Close() // saves the record
	if _, err := os.Stat(filepath.Join(state, id+".json")); err != nil {
		t.Fatalf("no position record after Close: %v", err)
	}
	m.Forget(id)
	if _, err := os.Stat(filepath.Join(state, id+".json")); !os.IsNotExist(err) {
		t.Errorf("position record still there after Forget: %v", err)
	}
}

// The kubelet removes the log file of an exited container before the container: a start of
// cri-dockerd in between (Resume) must not create the file again, while Follow (StartContainer)
// creates it before any output.
func TestResumeOfACompleteLogCreatesNoFile(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, state)
	m.Follow(id, path, false)
	fake.WriteLog(id, false, "x\n")
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Drained(ctx, id)
	m.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	again := newManager(t, fake, state)
	again.Resume(id, path, false)
	again.Drained(ctx, id)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the removed log file of the exited container is back after Resume (stat: %v)", err)
	}
}

// A start of cri-dockerd that finds the log of an exited container complete, in the file as in
// the record, leaves it alone: Docker is not asked for that log again.
func TestResumeOfACompleteLogAsksDockerNothing(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, state)
	m.Follow(id, path, false)
	if err := fake.WriteLog(id, false, "a\nb\n"); err != nil {
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Drained(ctx, id)
	m.Close()
	before := fake.Calls("ContainerLogs")
	again := newManager(t, fake, state)
	again.Resume(id, path, false)
	again.Drained(ctx, id)
	again.Close()
	if n := fake.Calls("ContainerLogs") - before; n != 0 {
		t.Errorf("%d log reads of a complete log after a start", n)
	}
	if lines := waitLines(t, path, 2); len(lines) != 2 {
		t.Errorf("lines %q, want a and b once", lines)
	}
}

// createFile leaves no file open behind it.
func TestCreateFileLeavesNoFileOpen(t *testing.T) {
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(entries)
	}
	dir := t.TempDir()
	before := count()
	for i := range 20 {
		if err := createFile(filepath.Join(dir, fmt.Sprintf("%d.log", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := count() - before; n > 0 {
		t.Errorf("%d more files open after 20 createFile calls", n)
	}
}

// A crash between a container's removal and its Forget leaves its record: the next start
// prunes it, with a temporary file of an interrupted write, and keeps the others'.
func TestPruneDropsTheRecordsOfContainersThatAreGone(t *testing.T) {
	state := t.TempDir()
	m := newManager(t, libdocker.NewFake(), state)
	for _, name := range []string{"kept.json", "kept.json.tmp", "gone.json", "gone.json.tmp", "other.json"} {
		if err := os.WriteFile(filepath.Join(state, name), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m.Prune(map[string]bool{"kept": true})
	entries, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "kept.json kept.json.tmp" {
		t.Errorf("records left after Prune: %v, want kept.json kept.json.tmp", left)
	}
}

func TestFilePositionCountsTrailingLinesWithTheSameTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	content := "2026-01-01T00:00:00.000000001Z stdout F a\n" +
		"2026-01-01T00:00:00.000000002Z stdout F b\n" +
		"2026-01-01T00:00:00.000000002Z stderr F c\n" +
		"2026-01-01T00:00:00.000000003Z stdout F torn"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	p, whole, err := filePosition(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Time.Nanosecond() != 2 || p.Count != 2 || whole {
		t.Errorf("position %+v, want time .000000002 and count 2 (the torn line does not count)", p)
	}
}

// A blank line at the start of the file (or of the window read) ends the search, after the
// complete line that follows it is counted.
func TestFilePositionAfterABlankFirstLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte("\n2026-01-01T00:00:00.000000005Z stdout F a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, whole, err := filePosition(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Time.Nanosecond() != 5 || p.Count != 1 || whole {
		t.Errorf("position %+v, want time .000000005 and count 1", p)
	}
}

// The kubelet opens the log file as soon as StartContainer answers, before any output.
func TestLogFileExistsWhenFollowReturns(t *testing.T) {
	fake := libdocker.NewFake()
	m := newManager(t, fake, t.TempDir())
	dir := t.TempDir()
	for i := range 50 {
		id := runningContainer(t, fake, false)
		path := filepath.Join(dir, fmt.Sprintf("pod-%d", i), "c.log")
		m.Follow(id, path, false)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("right after Follow: %v", err)
		}
	}
}

func TestFollowCreatesNoParentsAndRefusesUncleanPaths(t *testing.T) {
	fake := libdocker.NewFake()
	m := newManager(t, fake, t.TempDir())
	dir := t.TempDir()
	for _, path := range []string{
		filepath.Join(dir, "missing", "pod", "c", "0.log"), // the log directory's parents
		dir + "/pod/../../escaped.log",
		"relative/0.log",
	} {
		id := runningContainer(t, fake, false)
		m.Follow(id, path, false)
		fake.WriteLog(id, false, "hello\n")
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("the log directory's parents were created (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped.log")); !os.IsNotExist(err) {
		t.Errorf("a path with .. was followed (%v)", err)
		os.Remove(filepath.Join(filepath.Dir(dir), "escaped.log"))
	}
	if _, err := os.Stat("relative"); !os.IsNotExist(err) {
		t.Errorf("a relative path was followed (%v)", err)
	}
}

// Docker splits a line of 16 KiB or more into parts stamped with one time (the fake does as
// Docker does): a restart between two parts must resume at the next part, from the end of the
// file (a crash mid-line), from the position record (right after a rotation), or from the
// later of the two (a rotation, more parts written, then a crash), writing no part twice and
// losing none.
func TestRestartResumesAcrossLinesLongerThan16KiB(t *testing.T) {
	long1, long2 := strings.Repeat("a", 40000), strings.Repeat("b", 20000)
	output := "before\n" + long1 + "\n" + "after\n" + long2 + "\n" + "end\n"
	// before, three parts of long1 (P P F), after, two parts of long2 (P F), end.
	const total = 8
	readLines := func(path string) []string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			return nil
		}
		return strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	}
	// rotated lines went to the old file, the record saved at the rotation; cut lines in all
	// were written when cri-dockerd stopped.
	for cut := 1; cut < total; cut++ {
		for rotated := 0; rotated <= cut; rotated++ {
			fake := libdocker.NewFake()
			id := runningContainer(t, fake, false)
			if err := fake.WriteLog(id, false, output); err != nil {
				t.Fatal(err)
			}
			first := filepath.Join(t.TempDir(), "0.log")
			m := newManager(t, fake, t.TempDir())
			m.Follow(id, first, false)
			waitLines(t, first, total)
			m.Close()
			full := readLines(first)
			var tags, parts []string
			for _, line := range full {
				_, _, tag, content := fields(t, line)
				tags = append(tags, tag)
				parts = append(parts, strings.TrimSuffix(content, "\n"))
			}
			if got := strings.Join(tags, ""); got != "FPPFFPFF" || len(parts[1]) != 16384 || len(parts[2]) != 16384 || len(parts[5]) != 16384 {
				t.Fatalf("tags %s, part lengths %d %d %d; want FPPFFPFF and parts of 16384 bytes", got, len(parts[1]), len(parts[2]), len(parts[5]))
			}
			if strings.Join(parts[1:4], "") != long1 || strings.Join(parts[5:7], "") != long2 {
				t.Fatalf("the parts do not make the long lines")
			}

			state := t.TempDir()
			path := filepath.Join(t.TempDir(), "0.log")
			if rotated > 0 {
				last, _, _, _ := fields(t, full[rotated-1])
				count := 0
				for i := rotated - 1; i >= 0; i-- {
					if at, _, _, _ := fields(t, full[i]); !at.Equal(last) {
						break
					}
					count++
				}
				// As Reopen saves it: the position, which is also where the new file begins.
				if err := saveRecord(filepath.Join(state, id+".json"), position{Time: last, Count: count, FileTime: last, FileCount: count}); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(path, []byte(strings.Join(full[rotated:cut], "")), 0o640); err != nil {
				t.Fatal(err)
			}
			resumed := newManager(t, fake, state)
			resumed.Follow(id, path, false)
			if err := fake.ExitContainer(id, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resumed.Drained(ctx, id)
			cancel()
			resumed.Close()
			if got, want := readLines(path), full[rotated:]; strings.Join(got, "") != strings.Join(want, "") {
				t.Errorf("rotated after %d lines, stopped after %d: the file has %d lines (%s), want %d", rotated, cut, len(got), tagsOf(t, got), len(want))
			}
		}
	}
}

func tagsOf(t *testing.T, lines []string) string {
	t.Helper()
	var out strings.Builder
	for _, line := range lines {
		_, _, tag, content := fields(t, line)
		fmt.Fprintf(&out, "%s%d ", tag, len(strings.TrimSuffix(content, "\n")))
	}
	return out.String()
}

// The record a follower saves counts the parts of a long line it wrote, all stamped alike: a
// restart right after a rotation resumes after them.
func TestRecordCountsThePartsOfALongLine(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	first := newManager(t, fake, state)
	first.Follow(id, path, false)
	// Not ended yet: three partial messages of one stamp (16 KiB, 16 KiB, the rest).
	if err := fake.WriteLog(id, false, "before\n"+strings.Repeat("a", 40000)); err != nil {
		t.Fatal(err)
	}
	waitLines(t, path, 4)
	first.Close()
	if err := os.Rename(path, path+".1"); err != nil { // rotated while we were down
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	second := newManager(t, fake, state)
	second.Follow(id, path, false)
	if err := fake.WriteLog(id, false, "rest\n"); err != nil {
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	second.Drained(ctx, id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 1 || !strings.HasSuffix(lines[0], " stdout F rest") {
		t.Errorf("after the rotation and restart: %s; want only F rest", tagsOf(t, lines))
	}
}

// The parts of a line longer than the window read at a time from the file's end (37 parts of
// one stamp, 600 KB) are all counted: a restart after 30 of them writes the other 7.
func TestResumeInsideALineLongerThanTheTailWindow(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	if err := fake.WriteLog(id, false, strings.Repeat("x", 600000)+"\n"); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, "")
	m.Follow(id, first, false)
	full := waitLines(t, first, 37)
	m.Close()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(strings.Join(full[:30], "\n")+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if p, whole, err := filePosition(path); err != nil || p.Count != 30 || !whole {
		t.Errorf("filePosition = %+v, %v, %v; want 30 lines of one stamp, the whole file", p, whole, err)
	}
	resumed := newManager(t, fake, "")
	resumed.Follow(id, path, false)
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resumed.Drained(ctx, id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(string(data), "\n"); got != strings.Join(full, "\n") {
		t.Errorf("resumed after 30 of 37 parts: %d lines, want 37", strings.Count(got, "\n")+1)
	}
}

// While it writes, a follower saves its position at most every recordEvery: a crash after a
// rotation loses at most that much of the record.
func TestRecordFollowsTheWritesWhileRunning(t *testing.T) {
	t.Parallel() // it waits recordEvery
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, state)
	m.Follow(id, path, false)
	if err := fake.WriteLog(id, false, "a\n"); err != nil {
		t.Fatal(err)
	}
	waitLines(t, path, 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Reopen(id); err != nil { // saves the record now
		t.Fatal(err)
	}
	time.Sleep(recordEvery + 100*time.Millisecond)
	if err := fake.WriteLog(id, false, "b\n"); err != nil {
		t.Fatal(err)
	}
	lines := waitLines(t, path, 1)
	at, _, _, _ := fields(t, lines[0])
	var rec position
	if !testutil.PollUntil(5*time.Second, 10*time.Millisecond, func() bool {
		rec = loadRecord(m.recordPath(id))
		return rec.Time.Equal(at)
	}) {
		t.Fatalf("record %+v while running, want the line written %v after the last save (%v)", rec, recordEvery, at)
	}
}

// On a terminal Docker sends the parts of a long line back to back, each after its stamp: they
// become CRI lines of their own, without the stamps inside, and a restart between two parts
// resumes at the next one.
func TestTTYLongLineBecomesItsParts(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, true)
	path := filepath.Join(t.TempDir(), "0.log")
	m := newManager(t, fake, "")
	m.Follow(id, path, true)
	long := strings.Repeat("a", 40000)
	if err := fake.WriteLog(id, false, "before\r\n"+long+"\r\n"+"after\r\n"); err != nil {
		t.Fatal(err)
	}
	full := waitLines(t, path, 5)
	m.Close()
	var parts []string
	for _, line := range full {
		_, stream, tag, content := fields(t, line)
		parts = append(parts, stream+" "+tag+" "+strconv.Itoa(len(content)))
	}
	if got, want := strings.Join(parts, ", "), "stdout F 7, stdout P 16384, stdout P 16384, stdout F 7233, stdout F 6"; got != want {
		t.Fatalf("lines %s, want %s", got, want)
	}
	// Stopped after the first part: the rest of the line, once.
	if err := os.WriteFile(path, []byte(strings.Join(full[:2], "\n")+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	resumed := newManager(t, fake, "")
	resumed.Follow(id, path, true)
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resumed.Drained(ctx, id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(string(data), "\n"); got != strings.Join(full, "\n") {
		t.Errorf("resumed after the first part: %s", tagsOf(t, strings.SplitAfter(got, "\n")))
	}
}

// A container that stopped, its log written to the end, and that runs again (docker start,
// a restart policy) is followed again after a restart of cri-dockerd.
func TestDoneLogOfAContainerThatRunsAgainIsFollowed(t *testing.T) {
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "0.log")
	first := newManager(t, fake, state)
	first.Follow(id, path, false)
	if err := fake.WriteLog(id, false, "first run\n"); err != nil {
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first.Drained(ctx, id)
	first.Close()
	if rec := loadRecord(filepath.Join(state, id+".json")); !rec.Done {
		t.Fatalf("record after the exit %+v, want done", rec)
	}
	if err := fake.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := fake.WriteLog(id, false, "second run\n"); err != nil {
		t.Fatal(err)
	}
	second := newManager(t, fake, state)
	second.Follow(id, path, false)
	lines := waitLines(t, path, 2)
	if _, _, _, content := fields(t, lines[1]); content != "second run" {
		t.Errorf("lines %q, want the second run's output after the first", lines)
	}
}

// Close releases every log file it had open.
func TestCloseReleasesTheLogFiles(t *testing.T) {
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(entries)
	}
	fake := libdocker.NewFake()
	dir := t.TempDir()
	before := count()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	m, err := NewManager(fake, t.TempDir(), logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := runningContainer(t, fake, false)
		path := filepath.Join(dir, fmt.Sprintf("%d.log", i))
		m.Follow(id, path, false)
		if err := fake.WriteLog(id, false, "x\n"); err != nil {
			t.Fatal(err)
		}
		waitLines(t, path, 1)
	}
	m.Close()
	if after := count(); after > before+2 {
		t.Errorf("%d descriptors open after Close, %d before the manager: log files left open", after, before)
	}
}

// Followers counts the followers that run: a running container's, until it exited and its
// last lines are written.
func TestFollowersCountsTheFollowersThatRun(t *testing.T) {
	fake := libdocker.NewFake()
	m := newManager(t, fake, t.TempDir())
	if n := m.Followers(); n != 0 {
		t.Fatalf("a new manager has %d followers", n)
	}
	a, b := runningContainer(t, fake, false), runningContainer(t, fake, true)
	dir := t.TempDir()
	m.Follow(a, filepath.Join(dir, "a.log"), false)
	m.Follow(b, filepath.Join(dir, "b.log"), true)
	m.Follow(a, filepath.Join(dir, "a.log"), false) // already followed
	if n := m.Followers(); n != 2 {
		t.Errorf("%d followers of 2 running containers, want 2", n)
	}
	if err := fake.ExitContainer(a, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.Drained(ctx, a)
	if n := m.Followers(); n != 1 {
		t.Errorf("%d followers once one container exited and its log was drained, want 1", n)
	}
	m.Forget(b)
	if n := m.Followers(); n != 0 {
		t.Errorf("%d followers after Forget of the last, want 0", n)
	}
}
