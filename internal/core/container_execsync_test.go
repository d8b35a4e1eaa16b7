package core

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// ExecSync keeps the first maxExecOutput bytes of both streams together and drops the rest,
// however Docker splits the streams into frames; every write succeeds, so the copy goes on to
// the exit code, and the reply fits in a gRPC message.
func TestExecOutputKeepsTheFirstMaxExecOutputBytes(t *testing.T) {
	room := maxExecOutput
	stdout, stderr := cappedBuffer{room: &room}, cappedBuffer{room: &room}
	for i, w := range []struct {
		b *cappedBuffer
		n int
	}{{&stdout, maxExecOutput - 10}, {&stderr, 4}, {&stdout, 20}, {&stderr, 5}} {
		p := bytes.Repeat([]byte{byte('a' + i)}, w.n)
		if n, err := w.b.Write(p); n != w.n || err != nil {
			t.Fatalf("write %d of %d bytes = %d, %v", i, w.n, n, err)
		}
	}
	out, errOut := stdout.Bytes(), stderr.Bytes()
	if len(out)+len(errOut) != maxExecOutput || string(errOut) != "bbbb" || !strings.HasSuffix(string(out), "aacccccc") {
		t.Errorf("kept %d + %d bytes (stderr %q, stdout ending %q), want %d in all", len(out), len(errOut), errOut, out[max(0, len(out)-12):], maxExecOutput)
	}
	reply := &runtimeapi.ExecSyncResponse{Stdout: out, Stderr: errOut, ExitCode: 1}
	if size := proto.Size(reply); size > 16<<20 {
		t.Errorf("the reply is %d bytes, over the 16 MiB gRPC limit", size)
	}
}

func TestExecSyncReturnsOutputAndExitCode(t *testing.T) {
	t.Parallel() // it waits on clocks: beside the other tests that do, not after them
	fake := libdocker.NewFake()
	fake.SetExecHandler(func(_ string, cmd []string) libdocker.ExecResult {
		if cmd[0] == "sleep" {
			return libdocker.ExecResult{Delay: time.Minute}
		}
		return libdocker.ExecResult{Stdout: "hello\n", Stderr: "warn\n", ExitCode: 3}
	})
	s := newTestService(t, fake, Options{})
	logged := warnings(s)
	ctx := context.Background()
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	_, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo"}})
	wantCode(t, err, codes.FailedPrecondition) // not running yet
	if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo", "hello"}, Timeout: 5})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Stdout) != "hello\n" || string(resp.Stderr) != "warn\n" || resp.ExitCode != 3 {
		t.Errorf("got %q %q %d", resp.Stdout, resp.Stderr, resp.ExitCode)
	}
	start := time.Now()
	_, err = s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "60"}, Timeout: 1})
	wantCode(t, err, codes.DeadlineExceeded)
	if !strings.Contains(err.Error(), "timed out after 1s and was killed") {
		t.Errorf("timeout error %q, want it to say the command was killed", err)
	}
	for _, w := range logged() {
		if strings.Contains(w, "kill") {
			t.Errorf("a kill that worked logged %s", w)
		}
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("timeout of 1 s returned after %s", time.Since(start))
	}
	if n := fake.ExecRunning(id); n != 0 {
		t.Errorf("%d timed-out exec processes still running", n)
	}
	_, err = s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "nope", Cmd: []string{"true"}})
	wantCode(t, err, codes.NotFound)
	_, err = s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id})
	wantCode(t, err, codes.InvalidArgument)
}
