package main

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// Each plugin reads its own annotation for the container by name, as containerd/nri's samples.
func TestPluginsAdjustByAnnotation(t *testing.T) {
	pod := &api.PodSandbox{Annotations: map[string]string{
		"devices.nri.io/container.main":            `[{"path": "/dev/x", "type": "c", "major": 1, "minor": 3}]`,
		"ulimits.nri.containerd.io/container.main": `[{"type": "RLIMIT_NOFILE", "hard": 4321, "soft": 1234}]`,
	}}
	ctx := context.Background()
	adj, _, err := (&plugin{kind: "device-injector"}).CreateContainer(ctx, pod, &api.Container{Name: "main"})
	if err != nil || len(adj.GetLinux().GetDevices()) != 1 || adj.GetLinux().GetDevices()[0].GetPath() != "/dev/x" {
		t.Errorf("device-injector: %v, %v", adj, err)
	}
	adj, _, err = (&plugin{kind: "ulimit-adjuster"}).CreateContainer(ctx, pod, &api.Container{Name: "main"})
	if err != nil || len(adj.GetRlimits()) != 1 || adj.GetRlimits()[0].GetSoft() != 1234 || adj.GetRlimits()[0].GetHard() != 4321 {
		t.Errorf("ulimit-adjuster: %v, %v", adj, err)
	}
	adj, _, err = (&plugin{kind: "ulimit-adjuster"}).CreateContainer(ctx, pod, &api.Container{Name: "other"})
	if err != nil || len(adj.GetRlimits()) != 0 {
		t.Errorf("another container: %v, %v", adj, err)
	}
}
