// Package execkilltest is a fake Docker for the tests of callers of package execkill.
package execkilltest

import (
	"context"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// SandboxedDocker is the fake Docker of a runtime like gVisor: Docker's exec PID is no process
// of the container, a host kill (KillExec) only ends Docker's exec (counted in HostKills), and
// an exec of `sh -c SCRIPT sh MARK` kills the execs whose environment holds MARK, as execkill's
// script does inside the sandbox.
type SandboxedDocker struct {
	*libdocker.Fake

	// Mu guards the fields below; tests hold it to read them.
	Mu        sync.Mutex
	Env       map[string][]string // exec ID -> its Env
	Killers   map[string]string   // exec ID of an exec with a mark argument -> the mark
	HostKills int
}

// NewSandboxedDocker wraps a new libdocker fake.
func NewSandboxedDocker() *SandboxedDocker {
	return &SandboxedDocker{Fake: libdocker.NewFake(), Env: map[string][]string{}, Killers: map[string]string{}}
}

func (d *SandboxedDocker) CreateExec(ctx context.Context, id string, opts container.ExecOptions) (string, error) {
	execID, err := d.Fake.CreateExec(ctx, id, opts)
	if err == nil {
		d.Mu.Lock()
		d.Env[execID] = opts.Env
		if len(opts.Cmd) == 5 && opts.Cmd[0] == "sh" && opts.Cmd[1] == "-c" {
			d.Killers[execID] = opts.Cmd[4]
		}
		d.Mu.Unlock()
	}
	return execID, err
}

func (d *SandboxedDocker) AttachExec(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	d.Mu.Lock()
	var targets []string
	if mark, ok := d.Killers[execID]; ok {
		for id, env := range d.Env {
			for _, e := range env {
				if e == mark {
					targets = append(targets, id)
				}
			}
		}
	}
	d.Mu.Unlock()
	for _, id := range targets {
		if err := d.Fake.KillExec(ctx, id); err != nil {
			return types.HijackedResponse{}, err
		}
	}
	return d.Fake.AttachExec(ctx, execID, opts)
}

func (d *SandboxedDocker) KillExec(ctx context.Context, execID string) error {
	d.Mu.Lock()
	d.HostKills++
	d.Mu.Unlock()
	return d.Fake.KillExec(ctx, execID)
}
