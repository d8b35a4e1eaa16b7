package core

import (
	"context"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestRemoveImageByOneTagRemovesAllTagsAndConcurrentRemovalsSucceed(t *testing.T) {
	fake := libdocker.NewFake()
	id := fake.AddImage(libdocker.FakeImage("", "", "a/img:1", "a/img:2", "b/img:3"))
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "a/img:1"}})
			if err == nil {
				if st, _ := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: id}}); st.GetImage() != nil {
					err = context.DeadlineExceeded // image still visible after a successful removal
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent RemoveImage: %v", err)
		}
	}
	for _, ref := range []string{"a/img:2", "b/img:3", id} {
		if st, _ := s.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); st.GetImage() != nil {
			t.Errorf("%s still present", ref)
		}
	}
}
