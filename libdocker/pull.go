package libdocker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"
)

// PullImage reads Docker's progress stream to its end: Docker reports pull failures inside the
// stream, not as an HTTP error. A watchdog cancels the pull when no progress message arrives
// for progressDeadline, as upstream cri-dockerd's --image-pull-progress-deadline does.
func (c *client) PullImage(ctx context.Context, ref string, auth registry.AuthConfig, progressDeadline time.Duration) error {
	opts := image.PullOptions{}
	if auth != (registry.AuthConfig{}) {
		buf, err := json.Marshal(auth)
		if err != nil {
			return err
		}
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(buf)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := c.api.ImagePull(ctx, ref, opts)
	if err != nil {
		return classify(err)
	}
	defer stream.Close()

	progress := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	if progressDeadline > 0 {
		go func() {
			timer := time.NewTimer(progressDeadline)
			defer timer.Stop()
			for {
				select {
				case <-done:
					return
				case <-progress:
					timer.Reset(progressDeadline)
				case <-timer.C:
					cancel(fmt.Errorf("no pull progress for %s", progressDeadline))
					stream.Close()
					return
				}
			}
		}()
	}

	dec := json.NewDecoder(stream)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if cause := context.Cause(ctx); cause != nil {
				return fmt.Errorf("pull %s: %w", ref, cause)
			}
			return fmt.Errorf("pull %s: reading progress: %w", ref, err)
		}
		if msg.Error != nil {
			return classify(fmt.Errorf("pull %s: %w", ref, msg.Error))
		}
		select {
		case progress <- struct{}{}:
		default:
		}
	}
}
