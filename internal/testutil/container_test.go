package testutil

import (
	"context"
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"
)

type runner struct {
	created, started string
	createErr        error
}

func (r *runner) CreateContainer(_ context.Context, name string, _ *container.Config, _ *container.HostConfig) (string, error) {
	if r.createErr != nil {
		return "", r.createErr
	}
	r.created = name
	return "id-" + name, nil
}

func (r *runner) StartContainer(_ context.Context, id string) error {
	r.started = id
	return nil
}

func TestRunningContainerCreatesThenStarts(t *testing.T) {
	r := &runner{}
	if id := RunningContainer(t, r, "c1", &container.Config{}, nil); id != "id-c1" || r.created != "c1" || r.started != "id-c1" {
		t.Errorf("id %q, created %q, started %q", id, r.created, r.started)
	}
}

// fatal is a testing.TB whose Fatal records instead of ending the test.
type fatal struct {
	testing.TB
	called bool
}

func (f *fatal) Helper()      {}
func (f *fatal) Fatal(...any) { f.called = true }

func TestRunningContainerFailsTheTestOnAnError(t *testing.T) {
	f := &fatal{TB: t}
	r := &runner{createErr: errors.New("no such image")}
	RunningContainer(f, r, "c1", &container.Config{}, nil)
	if !f.called {
		t.Error("no Fatal on a failed create")
	}
}
