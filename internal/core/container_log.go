package core

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Containers we create with a log path get their output written there in the CRI log format
// by package containerlog. The value of logLabel marks them (and says whether they have a
// TTY): containers created by upstream cri-dockerd keep the symlink to Docker's json log they
// have. logDirectoryLabel is the pod's log directory the path was made in (see logPathOf).
const (
	logLabel          = ourLabelPrefix + "log"
	logCRI            = "cri"
	logCRIWithT       = "cri-tty"
	logDirectoryLabel = ourLabelPrefix + "log-directory"
)

// drainTimeout bounds how long ContainerStatus waits for the last lines of an exited container.
const drainTimeout = 5 * time.Second

// followLog starts writing a container's log from its labels.
func (s *Service) followLog(id string, labels map[string]string) {
	if path, tty, ok := s.criLogOf(id, labels); ok {
		s.logs.Follow(id, path, tty)
	}
}

// criLogOf is the log file we write for container id, from its labels, and whether it has a
// TTY. A path logPathOf refuses is warned of, once, and not followed.
func (s *Service) criLogOf(id string, labels map[string]string) (path string, tty, ok bool) {
	mode := labels[logLabel]
	if mode != logCRI && mode != logCRIWithT {
		return "", false, false
	}
	path, err := logPathOf(labels)
	if err != nil {
		s.warnOnce("log-path-refused:"+id, "container %s: not writing its log: %v", id, err)
		return "", false, false
	}
	return path, mode == logCRIWithT, path != ""
}

// logPathOf is a container's log path from its labels, "" for none. Where the pod's log
// directory is recorded, a path outside it is refused: CreateContainer never made it (it joins
// the directory and a local path), so it came from elsewhere, an image's labels say. Containers
// created before the directory was recorded (no such label) keep the path their labels give.
func logPathOf(labels map[string]string) (string, error) {
	path := labels[containerLogPathLabel]
	dir, recorded := labels[logDirectoryLabel]
	if path == "" || !recorded {
		return path, nil
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || !filepath.IsAbs(dir) || !filepath.IsAbs(path) || !filepath.IsLocal(rel) || rel == "." {
		return "", fmt.Errorf("log path %q is not inside the pod's log directory %q", path, dir)
	}
	return path, nil
}

// followExistingLogs resumes the logs of the containers Docker has, after a restart.
func (s *Service) followExistingLogs(ctx context.Context) error {
	list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: libdocker.LabelFilter(
		containerTypeLabel+"="+containerTypeContainer, logLabel)})
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(list))
	for _, c := range list {
		if c.State == "removing" || c.State == "dead" {
			// A removal that a crash of ours interrupted goes on without us: no one will
			// Forget the container, and it never runs again.
			continue
		}
		have[c.ID] = true
		if path, tty, ok := s.criLogOf(c.ID, c.Labels); ok {
			s.logs.Resume(c.ID, path, tty)
		}
	}
	// The records of containers removed while we were down (or killed) go.
	s.logs.Prune(have)
	return nil
}

// dockerLogPath is where Docker keeps its own json-file log of container id (its root's
// containers/ID/ID-json.log, Docker's layout since 1.x); the follower watches it for rotations.
// "" before Docker's /info is known.
func (s *Service) dockerLogPath(id string) string {
	info := s.runtimes.cached()
	if info == nil || info.DockerRootDir == "" {
		return ""
	}
	return filepath.Join(info.DockerRootDir, "containers", id, id+"-json.log")
}
