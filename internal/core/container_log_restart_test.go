package core

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// removingDocker lists the containers of removing as Docker lists them while it removes them:
// a removal that a crash of cri-dockerd interrupted goes on without it.
type removingDocker struct {
	*libdocker.Fake
	removing map[string]bool
}

func (d removingDocker) ListContainers(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	list, err := d.Fake.ListContainers(ctx, opts)
	for i := range list {
		if d.removing[list[i].ID] {
			list[i].State = "removing"
		}
	}
	return list, err
}

// A start of cri-dockerd drops the log position records of containers that Docker no longer
// has or is removing (nothing would Forget them: the fault test found both), and keeps the
// others'.
func TestStartPrunesTheLogRecordsOfGoneAndRemovingContainers(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{RootDirectory: root})
	podID, podCfg := runPod(t, s, "p", "")
	podCfg.LogDirectory = t.TempDir()
	kept := createContainer(t, s, podID, podCfg, "kept")
	removing := createContainer(t, s, podID, podCfg, "removing")
	s.Close()
	record := func(id string) string { return filepath.Join(root, "containerlogs", id+".json") }
	for _, id := range []string{kept, removing, "0123456789abcdef"} {
		if err := os.WriteFile(record(id), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	logger := logrus.New()
	logger.SetOutput(io.Discard)
	again, err := New(ctx, removingDocker{fake, map[string]bool{removing: true}}, Options{RootDirectory: root, PodInfraImage: testPauseImage, DefaultRuntimeHandler: "docker", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	if _, err := os.Stat(record(kept)); err != nil {
		t.Errorf("the record of a container Docker has is gone: %v", err)
	}
	for _, id := range []string{removing, "0123456789abcdef"} {
		if _, err := os.Stat(record(id)); !os.IsNotExist(err) {
			t.Errorf("record %s left after a start (stat: %v)", id, err)
		}
	}
}
