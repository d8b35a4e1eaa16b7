package libdocker

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// The real client's errors when dockerd is down (no socket, or a socket nobody listens on) are
// ErrUnavailable, for plain calls and hijacked ones alike; the fake's ConnectionFailed too.
func TestUnreachableDockerIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	for _, sock := range []string{filepath.Join(dir, "missing.sock"), stale} {
		c, err := New(Options{Endpoint: "unix://" + sock, RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		_, err = c.Info(ctx)
		if !IsUnavailable(err) {
			t.Errorf("%s: Info: %v, want unavailable", filepath.Base(sock), err)
		}
		if _, err = c.ListContainers(ctx, container.ListOptions{}); !IsUnavailable(err) {
			t.Errorf("%s: ListContainers: %v, want unavailable", filepath.Base(sock), err)
		}
		if _, err = c.AttachExec(ctx, "x", container.ExecAttachOptions{}); !IsUnavailable(err) {
			t.Errorf("%s: AttachExec: %v, want unavailable", filepath.Base(sock), err)
		}
	}
	f := NewFake()
	f.InjectError("Info", ConnectionFailed("unix:///var/run/docker.sock"))
	if _, err := f.Info(context.Background()); !IsUnavailable(err) {
		t.Errorf("fake: %v, want unavailable", err)
	}
	if IsUnavailable(classify(notFound("container", "x"))) || IsUnavailable(classify(context.DeadlineExceeded)) {
		t.Error("not found or a deadline classified as unavailable")
	}
	if err := classify(dErr(cerrdefs.ErrInvalidArgument, "invalid parameter")); IsUnavailable(err) || !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("invalid parameter: %v", err)
	}
	if !errors.Is(classify(ConnectionFailed("h")), ErrUnavailable) {
		t.Error("ConnectionFailed does not classify as ErrUnavailable")
	}
}
