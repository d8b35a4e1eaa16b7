package libdocker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/api/types/system"
)

// Fake is an in-memory Client for unit tests. It emulates the Docker daemon's observable
// behaviour (runtime defaulting and validation, name rules, image resolution, state machine,
// error kinds and texts, list filters) rather than recording calls, so a test of the CRI layer
// fails when the code relies on something Docker would not do. All methods are safe for
// concurrent use; one mutex guards all state.
type Fake struct {
	mu sync.Mutex

	apiVersion    string
	negotiated    bool
	engine        string
	defaultRT     string
	runtimes      map[string]system.Runtime
	broken        map[string]bool
	cgroupDriver  string
	logConfig     container.LogConfig // daemon.json's log-driver and log-opts
	rootDir       string              // Info().DockerRootDir
	securityOpts  []string
	experimental  bool                      // dockerd's "experimental": checkpoints (fake_checkpoint.go)
	criu          bool                      // CRIU on the node
	containers    map[string]*fakeContainer // by ID
	images        map[string]*image.InspectResponse
	pullable      map[string]image.InspectResponse // by familiar ref
	pullDelay     time.Duration
	lastPullAuth  registry.AuthConfig
	calls         map[string]int
	onceErrs      map[string][]error
	persistErrs   map[string]error
	hooks         map[string]func()
	afterHooks    map[string]func()
	seq, nextPid  int
	stopExitCodes map[string]int
	execs         map[string]*fakeExec
	execHandler   ExecHandler
	stopTimeouts  map[string]time.Duration
	// stats and events: fake_stats.go, fake_events.go
	stats            map[string]*fakeStats
	statsDelay       time.Duration
	statsInFlight    int
	statsMaxInFlight int
	subscribers      []*fakeSubscriber

	containerdStore bool // Docker's containerd image store (fake_imagestore.go)

	runtimeStatus map[string]map[string]string // Info().Runtimes[name].Status (API >= 1.44)
	runcCommit    string                       // Info().RuncCommit.ID
}

// fakeRuncCommit is what Docker 20.10 on Debian 12 reports as its default runtime's commit.
const fakeRuncCommit = "1.1.5+ds1-1+deb12u1"

type fakeContainer struct {
	seq      int
	resp     container.InspectResponse
	started  time.Time
	finished time.Time
	created  time.Time
	logs     []fakeLogMessage
	// changed is closed (and replaced) when logs grow or the container stops or goes away.
	changed chan struct{}
	removed bool
	sizeRw  int64 // the writable layer's bytes, as DiskUsage and an inspect with size tell
}

var _ Client = (*Fake)(nil)

// fakeShimName matches the containerd shim names Docker accepts unconfigured (io.containerd.NAME.vN).
var fakeShimName = regexp.MustCompile(`^io\.containerd\.[a-z0-9_-]+\.v[0-9]+$`)

// Engine versions for the API versions tests are likely to pin, so Version and Info agree.
var fakeEngineVersions = map[string]string{
	"1.41": "20.10.24", "1.43": "24.0.9", "1.44": "25.0.5", "1.45": "26.1.5", "1.46": "27.3.1",
	"1.47": "27.5.1", "1.48": "28.0.4", "1.49": "28.1.1", "1.50": "28.3.3", "1.51": "28.5.2",
}

// NewFake returns a daemon with the runtimes runc (default) and io.containerd.runc.v2, both
// "runc" from dockerd's PATH as Docker reports them, API version 1.41 (Docker 20.10), cgroupfs,
// and no images or containers.
func NewFake() *Fake {
	return &Fake{
		apiVersion: "1.41",
		engine:     fakeEngineVersions["1.41"],
		defaultRT:  "runc",
		runtimes: map[string]system.Runtime{
			"runc":                  {Path: "runc"},
			"io.containerd.runc.v2": {Path: "runc"},
		},
		runtimeStatus: map[string]map[string]string{},
		runcCommit:    fakeRuncCommit,
		broken:        map[string]bool{},
		cgroupDriver:  "cgroupfs",
		logConfig:     container.LogConfig{Type: "json-file"},
		rootDir:       "/var/lib/docker",
		securityOpts:  []string{"name=seccomp,profile=default", "name=cgroupns"},
		containers:    map[string]*fakeContainer{},
		images:        map[string]*image.InspectResponse{},
		pullable:      map[string]image.InspectResponse{},
		calls:         map[string]int{},
		onceErrs:      map[string][]error{},
		persistErrs:   map[string]error{},
		hooks:         map[string]func(){},
		afterHooks:    map[string]func(){},
		nextPid:       1000,
		stopExitCodes: map[string]int{},
	}
}

func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// clone deep-copies through JSON, which is what a real client's caller receives anyway.
func clone[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("libdocker.Fake: clone: %v", err))
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("libdocker.Fake: clone: %v", err))
	}
	return out
}
