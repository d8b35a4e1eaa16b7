package libdocker

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

func TestFakeAttachFollowsTheContainerLikeDocker(t *testing.T) {
	f := NewFake()
	ctx := context.Background()
	f.AddImage(FakeImage("", "", "busybox:1.36"))
	id, err := f.CreateContainer(ctx, "attach-me", &container.Config{Image: "busybox:1.36"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AttachContainer(ctx, id, container.AttachOptions{Stream: true, Stdout: true}); !IsConflict(err) {
		t.Errorf("attach to a created container: %v, want a conflict", err)
	}
	if err := f.ResizeContainer(ctx, id, 24, 80); !IsConflict(err) {
		t.Errorf("resize a created container: %v, want a conflict", err)
	}
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.ResizeContainer(ctx, id, 24, 80); err != nil {
		t.Errorf("resize a running container: %v", err)
	}
	stream, err := f.AttachContainer(ctx, id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := stream.Conn.Write([]byte("input is read")); err != nil {
		t.Errorf("write stdin: %v", err)
	}
	ended := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stream.Reader); close(ended) }()
	if err := f.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("attach stream did not end when the container stopped")
	}
	if err := f.ResizeExec(ctx, "nosuch", 24, 80); !IsNotFound(err) {
		t.Errorf("resize an unknown exec: %v, want not found", err)
	}
}
