package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
	"github.com/cri-dockerd/cri-dockerd/internal/replycodec"
	"github.com/cri-dockerd/cri-dockerd/internal/store"
)

// BenchmarkKubeletRelist is the kubelet's PLEG relist, every second on every node: the
// unfiltered ListPodSandbox and ListContainers of 100 pods of kubelet-like labels and
// annotations, answered from the store, and encoded by the codec cri-dockerd serves with. Its
// CPU was most of an idle node's cri-dockerd CPU (make bench-density's idle profile).
func BenchmarkKubeletRelist(b *testing.B) {
	for _, pods := range []int{100, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			fake := libdocker.NewFake()
			st := store.Wrap(fake, store.Options{Label: TrackedLabel})
			if err := st.Start(context.Background(), time.Second); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(st.Close)
			codec := replycodec.New()
			s := newTestServiceOn(b, fake, fake, Options{KeepReply: codec.Keep, Store: st})
			ctx := context.Background()
			for i := range pods {
				name := fmt.Sprintf("pod-%d", i)
				cfg := sandboxConfig(name)
				cfg.Labels = map[string]string{"app": name, "pod-template-hash": "5d9f7c", "io.kubernetes.pod.name": name,
					"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": cfg.Metadata.Uid}
				cfg.Annotations = map[string]string{"kubernetes.io/config.seen": "2026-12-01T22:00:00.000000000Z", "kubernetes.io/config.source": "api"}
				resp, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
				if err != nil {
					b.Fatal(err)
				}
				cc := containerConfig("app")
				cc.Labels = map[string]string{"io.kubernetes.container.name": "app", "io.kubernetes.pod.name": name,
					"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": cfg.Metadata.Uid}
				cc.Annotations = map[string]string{"io.kubernetes.container.hash": "8f2c1a7e", "io.kubernetes.container.restartCount": "0",
					"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
					"io.kubernetes.container.terminationMessagePolicy": "File", "io.kubernetes.pod.terminationGracePeriod": "30"}
				c, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cc, SandboxConfig: cfg})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				sandboxes, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
				if err != nil || len(sandboxes.Items) != pods {
					b.Fatalf("ListPodSandbox: %d, %v", len(sandboxes.GetItems()), err)
				}
				containers, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
				if err != nil || len(containers.Containers) != pods {
					b.Fatalf("ListContainers: %d, %v", len(containers.GetContainers()), err)
				}
				for _, m := range []proto.Message{sandboxes, containers} {
					data, err := codec.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			}
		})
	}
}
