package network

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnableHairpinSetsTheVethPeersBridgePort(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/42/root/sys/class/net/eth0/iflink", "17\n")
	write("sys/class/net/docker0/ifindex", "3\n")
	write("sys/class/net/veth1a/ifindex", "16\n")
	write("sys/class/net/veth1a/brport/hairpin_mode", "0\n")
	write("sys/class/net/veth2b/ifindex", "17\n")
	write("sys/class/net/veth2b/brport/hairpin_mode", "0\n")
	if err := EnableHairpin(root, 42); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"veth2b": "1", "veth1a": "0\n"} {
		got, _ := os.ReadFile(filepath.Join(root, "sys/class/net", name, "brport/hairpin_mode"))
		if string(got) != want {
			t.Errorf("%s hairpin_mode = %q, want %q", name, got, want)
		}
	}
	if err := EnableHairpin(root, 43); err == nil || !strings.Contains(err.Error(), "eth0 peer") {
		t.Errorf("EnableHairpin of a pid without eth0: %v", err)
	}
	write("proc/44/root/sys/class/net/eth0/iflink", "99\n")
	if err := EnableHairpin(root, 44); err == nil || !strings.Contains(err.Error(), "ifindex 99") {
		t.Errorf("EnableHairpin with no matching host link: %v", err)
	}
}
