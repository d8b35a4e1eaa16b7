package core

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestUpdateRuntimeConfigRefusesABadPodCIDRAndSavesNothing(t *testing.T) {
	update := func(s *Service, cidr string) error {
		_, err := s.UpdateRuntimeConfig(context.Background(), &runtimeapi.UpdateRuntimeConfigRequest{
			RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}}})
		return err
	}
	for _, cidr := range []string{
		strings.Repeat("x", 10<<10),
		"10.244.0.0",
		"10.244.0.0/24,10.245.0.0/24",
		"fd00::/64,fd01::/64",
		"10.244.0.0/24,fd00::/64,10.245.0.0/24",
		"10.244.0.0/24,../../etc",
		" , ",
	} {
		net, root := &fakeNet{}, t.TempDir()
		s := newNetService(t, libdocker.NewFake(), net, root)
		wantCode(t, update(s, cidr), codes.InvalidArgument)
		if _, err := os.Stat(filepath.Join(root, "pod-cidr")); !os.IsNotExist(err) {
			t.Errorf("pod_cidr %.40q: the pod-cidr file exists (%v)", cidr, err)
		}
		if net.podCIDR != "" {
			t.Errorf("pod_cidr %.40q reached the plugin as %.40q", cidr, net.podCIDR)
		}
	}
	net, root := &fakeNet{}, t.TempDir()
	s := newNetService(t, libdocker.NewFake(), net, root)
	if err := update(s, " 10.244.0.0/24, fd00:10:244::/64 "); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(root, "pod-cidr"))
	if want := "10.244.0.0/24,fd00:10:244::/64"; net.podCIDR != want || strings.TrimSpace(string(raw)) != want {
		t.Errorf("dual-stack pod CIDR reached the plugin as %q, saved as %q; want %q", net.podCIDR, raw, want)
	}
}

// A pod CIDR the kubelet changes is saved again: the next start hands the plugin the new one.
func TestUpdateRuntimeConfigSavesAChangedPodCIDR(t *testing.T) {
	net, root := &fakeNet{}, t.TempDir()
	s := newNetService(t, libdocker.NewFake(), net, root)
	for _, cidr := range []string{"10.244.1.0/24", "10.244.1.0/24", "10.244.2.0/24"} {
		if _, err := s.UpdateRuntimeConfig(context.Background(), &runtimeapi.UpdateRuntimeConfigRequest{
			RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}}}); err != nil {
			t.Fatal(err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(root, "pod-cidr")); err != nil || strings.TrimSpace(string(raw)) != "10.244.2.0/24" {
		t.Errorf("saved pod CIDR %q, %v; want the last one, 10.244.2.0/24", raw, err)
	}
}
