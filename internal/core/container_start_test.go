package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestStartFailureOfContainerNamesHandler(t *testing.T) {
	fake := libdocker.NewFake()
	fake.AddRuntime("flaky", "/definitely/missing/runtime")
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "flaky")
	id := createContainer(t, s, podID, podCfg, "c")
	fake.BreakRuntime("flaky")
	_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), `runtime handler "flaky"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("error %q", err)
	}
}
