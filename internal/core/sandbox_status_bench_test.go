package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
)

// BenchmarkPodSandboxStatus is the kubelet's GetPodStatus on a node of 100 pods with two
// containers each, through the store: PodSandboxStatus with its containers' statuses (what
// Evented PLEG takes), against the sandbox alone (what it answered before), in the same run.
// docker-calls/op counts the calls that reach the fake Docker past the store.
func BenchmarkPodSandboxStatus(b *testing.B) {
	fake := libdocker.NewFake()
	st := store.Wrap(fake, store.Options{Label: TrackedLabel})
	if err := st.Start(context.Background(), time.Second); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	s := newTestServiceOn(b, fake, fake, Options{Store: st})
	ctx := context.Background()
	var pods []string
	for i := range 100 {
		cfg := sandboxConfig(fmt.Sprintf("pod-%d", i))
		resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{"app", "sidecar"} {
			c, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: containerConfig(name), SandboxConfig: cfg})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
				b.Fatal(err)
			}
		}
		pods = append(pods, resp.PodSandboxId)
	}
	calls := func() int {
		n := 0
		for _, c := range []string{"InspectContainer", "InspectImage", "ListContainers"} {
			n += fake.Calls(c)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		call func(id string) error
	}{
		{"with-containers", func(id string) error {
			_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		}},
		{"sandbox-only", func(id string) error { _, err := s.podSandboxStatus(ctx, id, false); return err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			before := calls()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := tc.call(pods[i%len(pods)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(calls()-before)/float64(b.N), "docker-calls/op")
		})
	}
}
