package doctor

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
)

// daemonJSONPath is where dockerd reads its settings by default.
const daemonJSONPath = "/etc/docker/daemon.json"

// daemonLogSettings is what daemon.json says of containers' logs.
type daemonLogSettings struct {
	Driver string            `json:"log-driver"`
	Opts   map[string]string `json:"log-opts"`
}

// readDaemonLogSettings reads the log settings of daemon.json; a missing file sets nothing.
func readDaemonLogSettings(path string) (daemonLogSettings, error) {
	var s daemonLogSettings
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// dockerLogCheck says whether Docker's own copy of each container's log is bounded, and what
// cri-dockerd sets: driver is /info's LoggingDriver; the options come from daemon.json, as the
// Engine API does not report them (dockerd's --log-opt on its command line is not seen here;
// cri-dockerd itself reads them from a sandbox when it creates a container).
func dockerLogCheck(driver, daemonJSON string, cfg *config.Config) Check {
	check := Check{Name: "docker log", Status: OK}
	settings, err := readDaemonLogSettings(daemonJSON)
	switch {
	case driver == "local" || driver == "journald":
		check.Detail = fmt.Sprintf("Docker's log driver %s keeps a bounded log; cri-dockerd sets nothing", driver)
	case driver != "json-file":
		check.Status = Warn
		check.Detail = fmt.Sprintf("Docker's log driver %s: left alone; cri-dockerd reads containers' output through Docker's API, which for this driver serves Docker's local cache of the log (Docker 20.10+, unless the log-opt cache-disabled is true)", driver)
	case err != nil:
		check.Status = Warn
		check.Detail = fmt.Sprintf("Docker's log driver json-file; %s unreadable (%v): its max-size unknown here; %s", daemonJSON, err, applied(cfg, "when the daemon sets none"))
	case settings.Opts["max-size"] != "":
		check.Detail = fmt.Sprintf("Docker's log driver json-file, bounded by %s (max-size %s, max-file %s): kept; cri-dockerd sets nothing", daemonJSON, settings.Opts["max-size"], orOne(settings.Opts["max-file"]))
	default:
		check.Detail = fmt.Sprintf("Docker's log driver json-file, no max-size in %s: %s", daemonJSON, applied(cfg, "on each container"))
		if cfg.DockerLogLimit() == "" {
			check.Status = Warn
		}
	}
	return check
}

// applied says what --docker-log-max-size makes cri-dockerd set.
func applied(cfg *config.Config, where string) string {
	if cfg.DockerLogLimit() == "" {
		return "--docker-log-max-size 0: Docker's copy of each container's log grows without bound"
	}
	return fmt.Sprintf("cri-dockerd sets max-size %s, max-file %d %s", cfg.DockerLogLimit(), cfg.DockerLogMaxFile, where)
}

// orOne is json-file's max-file, 1 when unset.
func orOne(maxFile string) string {
	if maxFile == "" {
		return "1"
	}
	return maxFile
}
