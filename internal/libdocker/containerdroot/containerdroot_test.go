package containerdroot

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// pluginMsg encodes a Plugin {1 type, 2 id, 4 a platform (skipped), 5 exports}.
func pluginMsg(typ, id string, exports map[string]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, typ)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, id)
	platform := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "linux")
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, platform)
	for k, v := range exports {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
		entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), v)
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b
}

// fakeContainerd serves the introspection Plugins call on a unix socket, answering plugins
// and recording the filters it was sent.
func fakeContainerd(t *testing.T, plugins ...[]byte) (string, *[]string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var filters []string
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if method != pluginsMethod {
			t.Errorf("method %q, want %q", method, pluginsMethod)
		}
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		_ = eachField(req, func(num protowire.Number, v []byte) error {
			if num == 1 {
				filters = append(filters, string(v))
			}
			return nil
		})
		var resp []byte
		for _, p := range plugins {
			resp = protowire.AppendTag(resp, 1, protowire.BytesType)
			resp = protowire.AppendBytes(resp, p)
		}
		return stream.SendMsg(resp)
	}))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return sock, &filters
}

func TestSnapshotterRootFromIntrospection(t *testing.T) {
	sock, filters := fakeContainerd(t,
		pluginMsg("io.containerd.snapshotter.v1", "native", map[string]string{"root": "/var/lib/containerd/io.containerd.snapshotter.v1.native"}),
		pluginMsg("io.containerd.snapshotter.v1", "overlayfs", map[string]string{"root": "/data/containerd/io.containerd.snapshotter.v1.overlayfs", "capabilities": "remap-ids"}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root, err := SnapshotterRoot(ctx, sock, "overlayfs")
	if err != nil || root != "/data/containerd/io.containerd.snapshotter.v1.overlayfs" {
		t.Errorf("SnapshotterRoot = %q, %v", root, err)
	}
	if len(*filters) != 1 || (*filters)[0] != "type==io.containerd.snapshotter.v1,id==overlayfs" {
		t.Errorf("filters sent %q", *filters)
	}
	if _, err := SnapshotterRoot(ctx, sock, "zfs"); err == nil || !strings.Contains(err.Error(), `no root for snapshotter "zfs"`) {
		t.Errorf("unknown snapshotter: %v", err)
	}
}

func TestSnapshotterRootWithoutContainerd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := SnapshotterRoot(ctx, filepath.Join(t.TempDir(), "none.sock"), "overlayfs")
	if err == nil || !strings.Contains(err.Error(), "introspection") {
		t.Errorf("no containerd: %v", err)
	}
}

func TestParsePluginsRejectsGarbage(t *testing.T) {
	if _, err := parsePlugins([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Error("a truncated message parsed")
	}
}
