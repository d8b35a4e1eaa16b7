package core

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/unifiedcgroup"
)

// cgroupV2Label holds, as JSON, the cgroup v2 files of a container's unified map that Docker
// cannot take, from CreateContainer to StartContainer (which writes them): a label survives a
// restart of cri-dockerd between the two.
const cgroupV2Label = ourLabelPrefix + "cgroup-v2"

// cgroups is where the node's unified hierarchy and procfs are (fixtures in tests).
func (s *Service) cgroups() unifiedcgroup.Host {
	h := s.stats.Host()
	return unifiedcgroup.Host{Cgroups: h.CgroupRoot(), Proc: h.Proc()}
}

// labelCgroupV2 stores the files for StartContainer. A cgroup v1 node has no such files: the
// kubelet sends none there, so a request that does is refused rather than half applied.
func (s *Service) labelCgroupV2(labels map[string]string, files []unifiedcgroup.Setting) error {
	if len(files) == 0 {
		return nil
	}
	if !s.cgroups().V2() {
		return s.onCgroupV1(files[0])
	}
	m := make(map[string]string, len(files))
	for _, f := range files {
		m[f.File] = f.Value
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	labels[cgroupV2Label] = string(raw)
	return nil
}

// onCgroupV1 refuses a cgroup v2 file on a cgroup v1 node.
func (s *Service) onCgroupV1(f unifiedcgroup.Setting) error {
	return status.Errorf(codes.FailedPrecondition, "linux resources: unified %s=%s is a cgroup v2 setting, and this node runs cgroup v1 (%s is not the unified hierarchy)",
		f.File, f.Value, s.cgroups().Cgroups)
}

// startCgroupV2Label writes the files CreateContainer stored into the cgroup of the container
// Docker has just started. Should that fail, the container is stopped and the start fails, as
// runc fails a create whose unified map it cannot write. A container that has already ended
// needs nothing.
func (s *Service) startCgroupV2Label(ctx context.Context, id string, labels map[string]string) error {
	raw := labels[cgroupV2Label]
	if raw == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return status.Errorf(codes.Internal, "container %q: label %s: %v", id, cgroupV2Label, err)
	}
	files := make([]unifiedcgroup.Setting, 0, len(m))
	for k, v := range m {
		files = append(files, unifiedcgroup.Setting{File: k, Value: v})
	}
	slices.SortFunc(files, func(a, b unifiedcgroup.Setting) int { return strings.Compare(a.File, b.File) })
	err := s.writeCgroupV2(ctx, id, files)
	if err == nil {
		return nil
	}
	if serr := s.docker.StopContainer(context.WithoutCancel(ctx), id, 0); serr != nil {
		s.log.WithError(serr).WithField("container", id).Warn("stopping a container whose cgroup v2 settings could not be written")
	}
	return status.Errorf(codes.FailedPrecondition, "start container %q: %v; the container was stopped", id, err)
}

// writeCgroupV2 writes files into the cgroup of running container id. The process Docker
// names must be in a cgroup named for the container (docker-<id>.scope under the systemd
// driver, <id> under cgroupfs): a process that ended and whose PID was reused, or a runtime
// that puts the container elsewhere, gets nothing written, and no other cgroup is touched.
func (s *Service) writeCgroupV2(ctx context.Context, id string, files []unifiedcgroup.Setting) error {
	c, err := s.docker.InspectContainer(ctx, id)
	if err != nil {
		return err
	}
	if !c.State.Running || c.State.Pid == 0 {
		return nil
	}
	dir, err := s.cgroups().Dir(c.State.Pid)
	if errors.Is(err, unifiedcgroup.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	if !strings.Contains(filepath.Base(dir), c.ID) {
		// A runtime that keeps its containers in the pod's cgroup (Kata's sandbox_cgroup_only,
		// say) has no cgroup of the container to write: the start goes on, said once.
		if again, ierr := s.docker.InspectContainer(ctx, id); ierr == nil && again.State.Running {
			s.warnOnce("cgroup-v2-elsewhere:"+c.HostConfig.Runtime, "cgroup v2 settings (%s=%s, ...) not written for containers of Docker runtime %q: container %s's process (pid %d) is in %s, not in a cgroup of the container",
				files[0].File, files[0].Value, c.HostConfig.Runtime, id, c.State.Pid, dir)
		}
		return nil
	}
	begin := time.Now()
	if err := unifiedcgroup.Write(dir, files); err != nil {
		return err
	}
	s.log.WithField("container", id).WithField("cgroup", dir).Debugf("wrote %d cgroup v2 files in %s", len(files), time.Since(begin))
	return nil
}
