package replycodec

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func list(ids ...string) *runtimeapi.ListContainersResponse {
	out := &runtimeapi.ListContainersResponse{}
	for _, id := range ids {
		out.Containers = append(out.Containers, &runtimeapi.Container{Id: id, Labels: map[string]string{"app": id}})
	}
	return out
}

func encoded(t *testing.T, c *Codec, m proto.Message) []byte {
	t.Helper()
	data, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	return data.Materialize()
}

func decoded(t *testing.T, b []byte) *runtimeapi.ListContainersResponse {
	t.Helper()
	var out runtimeapi.ListContainersResponse
	if err := proto.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// A kept message is encoded once: the bytes sent are those of its first encoding (seen here
// by changing it afterwards, which its owner never does). Other messages, of its type too, are
// encoded each time, and keeping another replaces it.
func TestAKeptReplyIsEncodedOnce(t *testing.T) {
	c := New()
	kept := list("a", "b")
	c.Keep(kept)
	first := encoded(t, c, kept)
	if got := decoded(t, first); !proto.Equal(got, list("a", "b")) {
		t.Fatalf("kept reply decodes to %v", got)
	}
	kept.Containers[0].Id = "changed"
	if got := decoded(t, encoded(t, c, kept)); !proto.Equal(got, list("a", "b")) {
		t.Errorf("kept reply encoded again: %v", got)
	}

	other := list("c")
	if got := decoded(t, encoded(t, c, other)); !proto.Equal(got, list("c")) {
		t.Errorf("a reply not kept: %v", got)
	}
	other.Containers[0].Id = "d"
	if got := decoded(t, encoded(t, c, other)); got.Containers[0].Id != "d" {
		t.Errorf("a reply not kept was not encoded again: %v", got)
	}

	c.Keep(other)
	if got := decoded(t, encoded(t, c, kept)); !proto.Equal(got, kept) {
		t.Errorf("a reply no longer kept: %v, want its encoding now", got)
	}
}

type lister struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	reply *runtimeapi.ListContainersResponse
}

func (l *lister) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return l.reply, nil
}

// Through a gRPC server, as cri-dockerd serves: clients get the kept reply each time, and
// requests are decoded as before.
func TestServedThroughGRPC(t *testing.T) {
	c := New()
	reply := list("a", "b", "c")
	c.Keep(reply)
	lis := bufconn.Listen(1 << 20)
	server := grpc.NewServer(grpc.ForceServerCodecV2(c))
	runtimeapi.RegisterRuntimeServiceServer(server, &lister{reply: reply})
	go server.Serve(lis)
	defer server.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	for range 3 {
		got, err := client.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "a"}})
		if err != nil || !proto.Equal(got, list("a", "b", "c")) {
			t.Fatalf("ListContainers: %v, %v", got, err)
		}
	}
}
