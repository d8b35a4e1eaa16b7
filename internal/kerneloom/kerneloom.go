// Package kerneloom follows the kernel's log (/dev/kmsg) for OOM kills in memory cgroups and
// tells the container each killed task was in.
//
// Docker hears of an OOM kill from containerd's shim, which watches a container's cgroup only
// once the runtime's start has returned. A kill before that leaves no oom event and no
// State.OOMKilled: gVisor's sandbox outgrowing a small limit while it starts does this (critest's
// OOM spec saw exit 137 and reason Error). The kernel logs every kill, as the kubelet's own OOM
// watcher reads it.
package kerneloom

import (
	"errors"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/cri-dockerd/cri-dockerd/internal/dockerid"
)

// Path is the kernel's log device.
const Path = "/dev/kmsg"

// Open opens the kernel's log after the records already in it: a kill before we started is
// Docker's to have told (or lost) already.
func Open() (*os.File, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Follow reads kernel log records from r and calls killed with the container ID of each OOM
// kill, until r fails (closed, or at its end). /dev/kmsg gives one record per read and EPIPE
// when records were overwritten before we read them; those are skipped. A reader of plain text
// may give several lines per read.
func Follow(r io.Reader, killed func(containerID string)) error {
	buf := make([]byte, 16<<10) // more than a record's most (a read shorter than one fails)
	for {
		n, err := r.Read(buf)
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if id, ok := ContainerID(line); ok {
				killed(id)
			}
		}
		if errors.Is(err, syscall.EPIPE) {
			continue
		}
		if err != nil {
			return err
		}
	}
}

// ContainerID returns the container an "oom-kill:" record names the cgroup of: the 64-hex-digit
// ID that ends its task_memcg, whether the cgroup driver made it /docker/ID (cgroupfs),
// .../pod<uid>/ID (the kubelet's cgroupfs parent) or .../docker-ID.scope (systemd).
func ContainerID(record string) (string, bool) {
	_, msg, ok := strings.Cut(record, "oom-kill:")
	if !ok {
		return "", false
	}
	for _, field := range strings.Split(msg, ",") {
		memcg, ok := strings.CutPrefix(field, "task_memcg=")
		if !ok {
			continue
		}
		last := memcg[strings.LastIndex(memcg, "/")+1:]
		last = strings.TrimSuffix(strings.TrimPrefix(last, "docker-"), ".scope")
		return last, dockerid.IsFull(last)
	}
	return "", false
}
