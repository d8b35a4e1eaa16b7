//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// TestMain builds the binary once and checks that the Docker engine and images that hack/docker.sh and images.sh prepare
// is there. A missing engine fails the suite: skipping would let CI pass without testing anything.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "FAIL: integration setup: "+format+"\n", args...)
		return 1
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return fail("cannot find the module root with `go env GOMOD` (%v)", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	binDir, err := os.MkdirTemp("", "crid-it-bin-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(binDir)
	suite.binary = filepath.Join(binDir, "cri-dockerd")
	args := []string{"build", "-o", suite.binary}
	if os.Getenv("CRI_DOCKERD_RACE") == "1" {
		// The race detector makes the daemon exit 66 at the end of a run that raced, which
		// Daemon.Stop reports.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/cri-dockerd")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fail("go build ./cmd/cri-dockerd: %v\n%s", err, out)
	}

	suite.docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fail("docker client: %v", err)
	}
	defer suite.docker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := suite.docker.Ping(ctx); err != nil {
		return fail("dockerd is not reachable at %s: %v\nhint: %s", suite.docker.DaemonHost(), err, setupHint)
	}
	info, err := suite.docker.Info(ctx)
	if err != nil {
		return fail("docker info: %v", err)
	}
	for _, rt := range []string{"wrapped", "runc-alt", "broken"} {
		if _, ok := info.Runtimes[rt]; !ok {
			return fail("dockerd has no runtime %q\nhint: %s", rt, setupHint)
		}
	}
	for _, img := range []string{busyboxImage, pauseImage} {
		if _, err := suite.docker.ImageInspect(ctx, img); err != nil {
			return fail("image %s: %v\nhint: %s", img, err, setupHint)
		}
	}
	return m.Run()
}
