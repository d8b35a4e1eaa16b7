package supervise

import (
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

func TestRunTurnsAPanicIntoAnErrorAndLogsIt(t *testing.T) {
	log, hook := test.NewNullLogger()
	err := Run(log, "refresh", func() {
		var m map[string]int
		m["boom"]++ // a nil map write: a runtime panic
	})
	if err == nil || !strings.Contains(err.Error(), "refresh panicked") {
		t.Fatalf("error %v, want one saying refresh panicked", err)
	}
	entry := hook.LastEntry()
	if entry == nil || entry.Level != logrus.ErrorLevel || !strings.Contains(entry.Data["stack"].(string), "supervise_test.go") {
		t.Errorf("log entry %+v, want an error with the panic's stack", entry)
	}

	ran := false
	if err := Run(log, "quiet", func() { ran = true }); err != nil || !ran {
		t.Errorf("Run of work that does not panic: ran %v, error %v", ran, err)
	}
	if err := Run(log, "typed", func() { panic(errors.New("typed")) }); err == nil {
		t.Error("a panic with an error value must come back as an error")
	}
}
