package core

import (
	"context"
	"fmt"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// ctxNet is fakeNet whose calls honour their context, as a CNI plugin run under it does: a DEL
// under a cancelled context fails. onSetUp runs once the ADD has done its work.
type ctxNet struct {
	*fakeNet
	onSetUp func()
}

func (n *ctxNet) SetUp(ctx context.Context, att *network.Attachment, netns string) error {
	if err := n.fakeNet.SetUp(ctx, att, netns); err != nil {
		return err
	}
	if n.onSetUp != nil {
		n.onSetUp()
	}
	return ctx.Err()
}

func (n *ctxNet) TearDown(ctx context.Context, att *network.Attachment, netns string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("CNI DEL: %w", err)
	}
	return n.fakeNet.TearDown(ctx, att, netns)
}

// The kubelet cancels RunPodSandbox when its deadline expires, wherever the call stands. What
// the call made by then is undone under a context of its own: a cleanup under the caller's
// cancelled context would leave the container, its checkpoint and its network behind.
func TestRunPodSandboxCancelledMidwayLeavesNothing(t *testing.T) {
	for _, point := range []string{
		"InspectImage",     // the pause image check, before anything is made
		"CreateContainer",  // Docker creates the sandbox container
		"StartContainer",   // the container exists, not started
		"InspectContainer", // started; its network namespace is looked up for the plugin
		"SetUp",            // the plugin's ADD ran: its DEL must run too
		// The caller gives up while Docker works, and Docker finishes: the client answers the
		// context's error, and only the create's answer would have named the container.
		"after:CreateContainer",
		"after:StartContainer",
	} {
		t.Run(point, func(t *testing.T) {
			fake := libdocker.NewFake()
			net := &ctxNet{fakeNet: &fakeNet{}}
			root := t.TempDir()
			s := newNetService(t, fake, net, root)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch after, ok := strings.CutPrefix(point, "after:"); {
			case point == "SetUp":
				net.onSetUp = cancel
			case ok:
				fake.AfterCall(after, cancel)
			default:
				fake.OnCall(point, cancel)
			}
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")})
			fake.OnCall("InspectImage", nil)
			fake.OnCall("CreateContainer", nil)
			fake.OnCall("StartContainer", nil)
			fake.OnCall("InspectContainer", nil)
			fake.AfterCall("CreateContainer", nil)
			fake.AfterCall("StartContainer", nil)
			if err == nil {
				t.Fatalf("RunPodSandbox cancelled at %s succeeded", point)
			}
			if ctx.Err() == nil {
				t.Fatalf("the context was never cancelled: %s is not on RunPodSandbox's path (%v)", point, err)
			}
			if n := len(fake.Containers()); n != 0 {
				t.Errorf("%d containers left behind", n)
			}
			if files := checkpointFiles(t, root); len(files) != 0 {
				t.Errorf("checkpoints left behind: %v", files)
			}
			if n := s.pins.(*fakePins).count(); n != 0 {
				t.Errorf("%d network namespaces left pinned", n)
			}
			setUps, tearDowns := net.calls()
			if len(tearDowns) < len(setUps) {
				t.Errorf("%d network ADDs, %d DELs: an ADD was not undone", len(setUps), len(tearDowns))
			}
			if ids := s.sandboxes.ids(); len(ids) != 0 {
				t.Errorf("the sandbox index still knows %v", ids)
			}
			pods, err := s.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
			if err != nil || len(pods.Items) != 0 {
				t.Errorf("ListPodSandbox = %v, %v; want none", pods, err)
			}
			// The kubelet's retry gets the pod, under its own name.
			resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p")})
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			c, err := fake.InspectContainer(context.Background(), resp.PodSandboxId)
			if err != nil || c.Name != "/"+makeSandboxName(sandboxConfig("p").Metadata) {
				t.Errorf("retry made %v (%v), want the pod's own name", c.Name, err)
			}
		})
	}
}

// A CreateContainer whose caller gave up while Docker created the container removes it: the
// kubelet never learnt its ID, and its retry makes the container under the same name.
func TestCreateContainerAbandonedByItsCallerLeavesNothing(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake.AfterCall("CreateContainer", cancel)
	_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("c"), SandboxConfig: podCfg})
	fake.AfterCall("CreateContainer", nil)
	if err == nil {
		t.Fatal("CreateContainer whose caller gave up succeeded")
	}
	if n := len(fake.Containers()); n != 1 {
		t.Errorf("%d containers, want the sandbox's alone", n)
	}
	id := createContainer(t, s, podID, podCfg, "c")
	c, err := fake.InspectContainer(context.Background(), id)
	if err != nil || c.Name != "/"+makeContainerName(podCfg.Metadata, containerConfig("c").Metadata) {
		t.Errorf("retry made %v (%v), want the container's own name", c.Name, err)
	}
}
