package core

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// frozenDocker stands for a dockerd stopped with SIGSTOP: while frozen, Ping, Info and Version
// take the connection and never answer, so they end only with their context.
type frozenDocker struct {
	*libdocker.Fake
	frozen atomic.Bool
}

func (d *frozenDocker) hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (d *frozenDocker) Ping(ctx context.Context) error {
	if d.frozen.Load() {
		return d.hang(ctx)
	}
	return d.Fake.Ping(ctx)
}

func (d *frozenDocker) Info(ctx context.Context) (system.Info, error) {
	if d.frozen.Load() {
		return system.Info{}, d.hang(ctx)
	}
	return d.Fake.Info(ctx)
}

func (d *frozenDocker) Version(ctx context.Context) (types.Version, error) {
	if d.frozen.Load() {
		return types.Version{}, d.hang(ctx)
	}
	return d.Fake.Version(ctx)
}

// With Docker frozen, Status answers within its own bound, not the caller's: not ready, with
// the reason that tells a frozen Docker from a stopped one, and the handlers it last knew.
// Version answers the version Docker last gave.
func TestStatusAnswersWhileDockerIsFrozen(t *testing.T) {
	fake := libdocker.NewFake()
	docker := &frozenDocker{Fake: fake}
	s := newTestServiceOn(t, fake, docker, Options{StatusTimeout: 100 * time.Millisecond, RuntimeInfoMaxAge: time.Nanosecond})
	s.runtimes.minInterval = 0
	before, err := s.Version(context.Background(), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	docker.frozen.Store(true)

	// The caller's deadline is far away: only Status's own bound can end the call.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	resp, err := s.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status with Docker frozen: %v", err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Status || c.Reason != "DockerDaemonNotResponding" || !strings.Contains(c.Message, "did not answer") {
			t.Errorf("condition %s = %v, reason %q, message %q; want false, DockerDaemonNotResponding, a message saying Docker did not answer", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if !hasHandler(resp, "runc") {
		t.Errorf("runtime handlers %v with Docker frozen: want the ones Docker last reported", resp.RuntimeHandlers)
	}
	v, err := s.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeVersion != before.RuntimeVersion {
		t.Errorf("Version with Docker frozen = %v, %v; want the last answer %q", v, err, before.RuntimeVersion)
	}

	docker.frozen.Store(false)
	resp, err = s.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if !c.Status {
			t.Errorf("condition %s after Docker thawed: not ready (%s)", c.Type, c.Message)
		}
	}
}

// A Docker that refuses the connection is not ready, not "not responding".
func TestStatusTellsAStoppedDockerFromAFrozenOne(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	fake.InjectPersistentError("Ping", libdocker.ConnectionFailed("unix:///var/run/docker.sock"))
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Status || c.Reason != "DockerDaemonNotReady" || !strings.Contains(c.Message, "Cannot connect") {
			t.Errorf("condition %s = %v, reason %q, message %q; want false, DockerDaemonNotReady and Docker's error", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

func hasHandler(resp *runtimeapi.StatusResponse, name string) bool {
	for _, h := range resp.RuntimeHandlers {
		if h.Name == name {
			return true
		}
	}
	return false
}
