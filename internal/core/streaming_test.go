package core

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// recordingStreams is a StreamingServer that records what it was asked for.
type recordingStreams struct {
	execs    []*runtimeapi.ExecRequest
	attaches []*runtimeapi.AttachRequest
	forwards []*runtimeapi.PortForwardRequest
}

func (r *recordingStreams) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	r.execs = append(r.execs, req)
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1:1/exec/t"}, nil
}

func (r *recordingStreams) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	r.attaches = append(r.attaches, req)
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1:1/attach/t"}, nil
}

func (r *recordingStreams) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	r.forwards = append(r.forwards, req)
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1:1/portforward/t"}, nil
}

func TestStreamingRequestsAreCheckedBeforeAURLIsHandedOut(t *testing.T) {
	fake := libdocker.NewFake()
	streams := &recordingStreams{}
	s := newTestService(t, fake, Options{Streaming: streams})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	running := createContainer(t, s, podID, podCfg, "running")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: running}); err != nil {
		t.Fatal(err)
	}
	created := createContainer(t, s, podID, podCfg, "created")
	stoppedPod, _ := runPod(t, s, "stopped", "")
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: stoppedPod}); err != nil {
		t.Fatal(err)
	}
	cmd := []string{"sh"}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		frag string
	}{
		{"exec no id", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{Cmd: cmd, Stdout: true})
			return err
		}, codes.InvalidArgument, "container_id"},
		{"exec no cmd", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Stdout: true})
			return err
		}, codes.InvalidArgument, "cmd"},
		{"exec empty cmd", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Cmd: []string{""}, Stdout: true})
			return err
		}, codes.InvalidArgument, "cmd"},
		{"exec no stream", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Cmd: cmd})
			return err
		}, codes.InvalidArgument, "stdin, stdout and stderr"},
		{"exec tty and stderr", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Cmd: cmd, Tty: true, Stdout: true, Stderr: true})
			return err
		}, codes.InvalidArgument, "tty and stderr"},
		{"exec unknown", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "nosuch", Cmd: cmd, Stdout: true})
			return err
		}, codes.NotFound, "nosuch"},
		{"exec in sandbox", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: podID, Cmd: cmd, Stdout: true})
			return err
		}, codes.NotFound, "not a CRI container"},
		{"exec in created container", func() error {
			_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: created, Cmd: cmd, Stdout: true})
			return err
		}, codes.FailedPrecondition, "not running (state created)"},
		{"attach no stream", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: running})
			return err
		}, codes.InvalidArgument, "stdin, stdout and stderr"},
		{"attach tty and stderr", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: running, Tty: true, Stderr: true})
			return err
		}, codes.InvalidArgument, "tty and stderr"},
		{"attach not running", func() error {
			_, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: created, Stdout: true})
			return err
		}, codes.FailedPrecondition, "not running"},
		{"port-forward no id", func() error {
			_, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{})
			return err
		}, codes.InvalidArgument, "pod_sandbox_id"},
		{"port-forward bad port", func() error {
			_, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{0}})
			return err
		}, codes.InvalidArgument, "port 0"},
		{"port-forward to a container", func() error {
			_, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: running})
			return err
		}, codes.NotFound, "not a pod sandbox"},
		{"port-forward not ready", func() error {
			_, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: stoppedPod})
			return err
		}, codes.FailedPrecondition, "not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.frag) {
				t.Errorf("got %v, want code %v and a message with %q", err, tc.code, tc.frag)
			}
		})
	}
	if len(streams.execs)+len(streams.attaches)+len(streams.forwards) != 0 {
		t.Errorf("the streaming server was asked for a URL for a rejected request")
	}
}

func TestStreamingRequestsReachTheServerWithFullIDs(t *testing.T) {
	fake := libdocker.NewFake()
	streams := &recordingStreams{}
	s := newTestService(t, fake, Options{Streaming: streams})
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	req := &runtimeapi.ExecRequest{ContainerId: id[:12], Cmd: []string{"sh"}, Stdin: true, Stdout: true, Tty: true}
	resp, err := s.Exec(ctx, req)
	if err != nil || resp.Url == "" {
		t.Fatalf("Exec: %v", err)
	}
	if len(streams.execs) != 1 || streams.execs[0].ContainerId != id || !streams.execs[0].Tty || !streams.execs[0].Stdin {
		t.Errorf("streaming server got %v, want the full ID %s and the same options", streams.execs, id)
	}
	if req.ContainerId != id[:12] {
		t.Errorf("the caller's request was modified")
	}
	if _, err := s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true, Stderr: true}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if _, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID[:12], Port: []int32{80, 65535}}); err != nil {
		t.Fatalf("PortForward: %v", err) // 65535 is the highest TCP port, and a valid one
	}
	if len(streams.attaches) != 1 || len(streams.forwards) != 1 || streams.forwards[0].PodSandboxId != podID {
		t.Errorf("attach %v, port-forward %v", streams.attaches, streams.forwards)
	}
}

func TestStreamingWithoutServerIsUnimplemented(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	ctx := context.Background()
	_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Stdout: true})
	wantCode(t, err, codes.Unimplemented)
	_, err = s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
	wantCode(t, err, codes.Unimplemented)
	_, err = s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "p"})
	wantCode(t, err, codes.Unimplemented)
}
