package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
)

func TestDoctorSaysWhetherDockersLogIsBounded(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bounded := write("bounded.json", `{"log-driver":"json-file","log-opts":{"max-size":"50m","max-file":"2"}}`)
	plain := write("plain.json", `{"runtimes":{}}`)
	broken := write("broken.json", `{`)
	on := config.Default()
	off := config.Default()
	off.DockerLogMaxSize = "0"
	for _, tc := range []struct {
		name, driver, daemonJSON string
		cfg                      *config.Config
		status                   Status
		says                     string
	}{
		{"unbounded json-file gets ours", "json-file", plain, on, OK, "cri-dockerd sets max-size 10m, max-file 3 on each container"},
		{"no daemon.json", "json-file", filepath.Join(dir, "missing.json"), on, OK, "cri-dockerd sets max-size 10m"},
		{"the daemon's bound is kept", "json-file", bounded, on, OK, "max-size 50m, max-file 2): kept"},
		{"off and unbounded", "json-file", plain, off, Warn, "grows without bound"},
		{"unreadable daemon.json", "json-file", broken, on, Warn, "unreadable"},
		{"local", "local", plain, on, OK, "bounded log"},
		{"syslog", "syslog", plain, on, Warn, "local cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dockerLogCheck(tc.driver, tc.daemonJSON, tc.cfg)
			if c.Status != tc.status || !strings.Contains(c.Detail, tc.says) {
				t.Errorf("%s: %s, want %s saying %q", c.Status, c.Detail, tc.status, tc.says)
			}
		})
	}
}
