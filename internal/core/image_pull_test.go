package core

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestPullImageHonoursRequestContext(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddPullable("slow/img:1", libdocker.FakeImage("", "", "slow/img:1"))
	fake.SetPullDelay(10 * time.Second)
	s := newTestService(t, fake, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "slow/img:1"}})
	wantCode(t, err, codes.DeadlineExceeded)
	if time.Since(start) > 5*time.Second {
		t.Errorf("pull returned after %s, not when the request's deadline passed", time.Since(start))
	}
}
