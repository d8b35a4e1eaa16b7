package containerlog

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// A container's log written, completed at its exit and resumed at the next start, with nothing
// going wrong, puts no warning in cri-dockerd's log: each warning there is a fault to look into.
func TestALogWithoutFaultsLogsNoWarnings(t *testing.T) {
	logger, hook := test.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	fake := libdocker.NewFake()
	id := runningContainer(t, fake, false)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "c", "0.log")
	m, err := NewManager(fake, state, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	m.Follow(id, path, false)
	if err := fake.WriteLog(id, false, "one\ntwo\n"); err != nil {
		t.Fatal(err)
	}
	if err := fake.WriteLog(id, true, "last, unterminated"); err != nil {
		t.Fatal(err)
	}
	if err := fake.ExitContainer(id, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Drained(ctx, id)
	m.Close()
	again, err := NewManager(fake, state, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	again.Resume(id, path, false)
	again.Drained(ctx, id)
	again.Close()
	if lines := waitLines(t, path, 3); len(lines) != 3 {
		t.Errorf("lines %q, want three", lines)
	}
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("%s: %s", e.Level, e.Message)
		}
	}
}

// A log stream Docker breaks off, while the container runs or in the last read after its
// exit, is a warning in cri-dockerd's log.
func TestABrokenLogStreamIsAWarning(t *testing.T) {
	for _, atExit := range []bool{false, true} {
		logger, hook := test.NewNullLogger()
		fake := libdocker.NewFake()
		id := runningContainer(t, fake, false)
		m, err := NewManager(fake, t.TempDir(), logrus.NewEntry(logger))
		if err != nil {
			t.Fatal(err)
		}
		broken := errors.New("error from daemon in stream: unexpected EOF")
		if !atExit {
			fake.InjectError("ContainerLogs", broken)
		}
		m.Follow(id, filepath.Join(t.TempDir(), "c", "0.log"), false)
		if atExit {
			for fake.Calls("ContainerLogs") == 0 {
				time.Sleep(time.Millisecond)
			}
			fake.InjectError("ContainerLogs", broken) // the read after the exit
			if err := fake.ExitContainer(id, 0); err != nil {
				t.Fatal(err)
			}
		}
		warned := func() bool {
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "unexpected EOF") {
					return true
				}
			}
			return false
		}
		testutil.PollUntil(5*time.Second, 10*time.Millisecond, warned)
		m.Close()
		if !warned() {
			t.Errorf("broken at the exit %v: no warning in %d log entries", atExit, len(hook.AllEntries()))
		}
	}
}
