package libdocker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"
)

// SetCheckpoints says what the fake daemon can checkpoint: experimental is dockerd's
// "experimental" (Info's ExperimentalBuild; without it the route is not served), criu whether
// CRIU is on its node.
func (f *Fake) SetCheckpoints(experimental, criu bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.experimental, f.criu = experimental, criu
}

// FakeCriuImages are the files the fake writes for a checkpoint, as CRIU's dump would.
var FakeCriuImages = map[string]string{"inventory.img": "fake criu inventory", "pages-1.img": "fake criu pages", "dump.log": "fake criu dump log"}

// CheckpointContainer implements Client: dir/name gets FakeCriuImages; the container keeps
// running. Errors are Docker 20.10's.
func (f *Fake) CheckpointContainer(ctx context.Context, id, name, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "CheckpointContainer"); err != nil {
		return err
	}
	if !f.experimental {
		return errors.New("Error response from daemon: page not found")
	}
	c, err := f.lookupContainer(id)
	if err != nil {
		return err
	}
	if !c.resp.State.Running {
		return fmt.Errorf("Error response from daemon: Container %s is not running: %w", id, cerrdefs.ErrConflict)
	}
	if !f.criu {
		return fmt.Errorf("Error response from daemon: Cannot checkpoint container %s: runc: criu failed: type NOTIFY errno 0: exec: \"criu\": executable file not found in $PATH", id)
	}
	out := filepath.Join(dir, name)
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	for file, body := range FakeCriuImages {
		if err := os.WriteFile(filepath.Join(out, file), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return f.leave(ctx, "CheckpointContainer")
}
