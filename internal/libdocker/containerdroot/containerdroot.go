// Package containerdroot asks containerd where a snapshotter keeps its data, and where a
// container's writable snapshot is. With Docker's
// containerd image store (Docker 29's default) image layers and containers' writable layers
// live there, not under Docker's data root, so the image filesystem the kubelet watches is
// that directory's. containerd's introspection service reports each plugin's root in its
// exports; the two messages needed are encoded by hand (protowire) rather than pulling in
// containerd's API module for one call.
package containerdroot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	pluginsMethod = "/containerd.services.introspection.v1.Introspection/Plugins"
	mountsMethod  = "/containerd.services.snapshots.v1.Snapshots/Mounts"
)

// UpperDir returns the overlay upper directory of the snapshot key (Docker names a
// container's writable snapshot after the container's ID) in containerd namespace ns: where
// the container's writes land, as an overlay2 UpperDir does with the classic store.
func UpperDir(ctx context.Context, address, ns, snapshotter, key string) (string, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), snapshotter)
	req = protowire.AppendString(protowire.AppendTag(req, 2, protowire.BytesType), key)
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", ns)
	var resp []byte
	if err := conn.Invoke(ctx, mountsMethod, req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return "", fmt.Errorf("containerd at %s: mounts of snapshot %s: %w", address, key, err)
	}
	// MountsResponse {1 repeated Mount {1 type, 2 source, 3 target, 4 repeated options}}
	var upper string
	err = eachField(resp, func(num protowire.Number, m []byte) error {
		if num != 1 {
			return nil
		}
		return eachField(m, func(num protowire.Number, v []byte) error {
			if opt, ok := strings.CutPrefix(string(v), "upperdir="); num == 4 && ok {
				upper = opt
			}
			return nil
		})
	})
	if err != nil {
		return "", fmt.Errorf("containerd at %s: mounts of snapshot %s: %w", address, key, err)
	}
	if upper == "" {
		return "", fmt.Errorf("containerd at %s: snapshot %s has no overlay upper directory", address, key)
	}
	return upper, nil
}

// SnapshotterRoot returns the root directory of containerd's snapshotter named snapshotter
// (e.g. "overlayfs"), asking the containerd at address (a unix socket path).
func SnapshotterRoot(ctx context.Context, address, snapshotter string) (string, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, "type==io.containerd.snapshotter.v1,id=="+snapshotter)
	var resp []byte
	if err := conn.Invoke(ctx, pluginsMethod, req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return "", fmt.Errorf("containerd at %s: introspection: %w", address, err)
	}
	plugins, err := parsePlugins(resp)
	if err != nil {
		return "", fmt.Errorf("containerd at %s: introspection answer: %w", address, err)
	}
	for _, p := range plugins {
		if p.id == snapshotter && p.exports["root"] != "" {
			return p.exports["root"], nil
		}
	}
	return "", fmt.Errorf("containerd at %s reports no root for snapshotter %q", address, snapshotter)
}

type plugin struct {
	typ, id string
	exports map[string]string
}

// parsePlugins decodes a PluginsResponse: field 1, repeated Plugin {1 type, 2 id, 5 exports
// (map entries {1 key, 2 value})}; other fields are skipped.
func parsePlugins(b []byte) ([]plugin, error) {
	var out []plugin
	err := eachField(b, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		p := plugin{exports: map[string]string{}}
		err := eachField(v, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				p.typ = string(v)
			case 2:
				p.id = string(v)
			case 5:
				var key, value string
				if err := eachField(v, func(num protowire.Number, v []byte) error {
					switch num {
					case 1:
						key = string(v)
					case 2:
						value = string(v)
					}
					return nil
				}); err != nil {
					return err
				}
				p.exports[key] = value
			}
			return nil
		})
		out = append(out, p)
		return err
	})
	return out, err
}

// eachField calls fn with every length-delimited field of a message; other wire types are
// skipped (none of the fields read here has one).
func eachField(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// rawCodec sends and receives messages already encoded.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return nil, errors.New("rawCodec: want []byte")
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return errors.New("rawCodec: want *[]byte")
	}
	*p = append((*p)[:0], data...)
	return nil
}

// Name is "proto": containerd's server reads the content subtype as protobuf.
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}
