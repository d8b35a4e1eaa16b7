package core

import (
	"context"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker down while we serve is Unavailable (clients retry); a request Docker calls invalid is
// InvalidArgument. Both were Unknown.
func TestDockerErrorCodes(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	down := libdocker.ConnectionFailed("unix:///var/run/docker.sock")

	fake.InjectError("StartContainer", down)
	_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.Unavailable)
	fake.InjectError("StopContainer", down)
	_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
	wantCode(t, err, codes.Unavailable)
	fake.InjectError("CreateContainer", down)
	_, err = s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("q")})
	wantCode(t, err, codes.Unavailable)

	fake.InjectError("StopContainer", fmt.Errorf("Error response from daemon: invalid parameter: %w", cerrdefs.ErrInvalidArgument))
	_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
	wantCode(t, err, codes.InvalidArgument)

	// 17 containers: two of them share the first hex digit of their ids, an ambiguous prefix.
	seen := map[byte]bool{}
	var prefix string
	for i := 0; prefix == ""; i++ {
		c := createContainer(t, s, podID, podCfg, fmt.Sprintf("x%d", i))
		if seen[c[0]] {
			prefix = c[:1]
		}
		seen[c[0]] = true
	}
	_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: prefix})
	wantCode(t, err, codes.InvalidArgument)
}
