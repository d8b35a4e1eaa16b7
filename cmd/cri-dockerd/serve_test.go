package main

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// The start of the metrics listener says whether pprof is on, and one warning says that a
// listener beyond loopback is readable by anyone who reaches it.
func TestMetricsListenerLogsPprofAndWarnsBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		bind  string
		pprof bool
		warn  string // "" no warning, else a part of it
	}{
		{"127.0.0.1:9099", false, ""},
		{"localhost:9099", true, ""},
		{"0.0.0.0:9099", false, "anyone who reaches the port reads /metrics, with no authentication"},
		{":9099", true, "anyone who reaches the port reads /metrics and /debug/pprof, with no authentication"},
	} {
		logger, hook := test.NewNullLogger()
		logger.SetOutput(io.Discard)
		addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9099}
		logMetricsListening(logrus.NewEntry(logger), addr, tc.bind, tc.pprof)

		var warnings []string
		listening := 0
		for _, e := range hook.AllEntries() {
			switch {
			case e.Level == logrus.WarnLevel:
				warnings = append(warnings, e.Message)
			case e.Message == "metrics listening":
				listening++
				if e.Data["pprof"] != tc.pprof || e.Data["address"] != addr.String() {
					t.Errorf("%s: metrics listening with %v, want pprof=%v address=%s", tc.bind, e.Data, tc.pprof, addr)
				}
			}
		}
		if listening != 1 {
			t.Errorf("%s: %d \"metrics listening\" lines, want 1", tc.bind, listening)
		}
		switch {
		case tc.warn == "" && len(warnings) > 0:
			t.Errorf("%s: warned %q, want no warning on loopback", tc.bind, warnings)
		case tc.warn != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.warn) || !strings.Contains(warnings[0], tc.bind)):
			t.Errorf("%s: warned %q, want one warning that names the address and says %q", tc.bind, warnings, tc.warn)
		}
	}
}
