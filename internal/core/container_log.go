package core

import (
	"context"
	"path/filepath"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Containers we create with a log path get their output written there in the CRI log format
// by package containerlog. The label logLabel marks them (and says whether they have a TTY):
// containers created by upstream cri-dockerd keep the symlink to Docker's json log they have.
const (
	logLabel    = ourLabelPrefix + "log"
	logCRI      = "cri"
	logCRIWithT = "cri-tty"
)

// drainTimeout bounds how long ContainerStatus waits for the last lines of an exited container.
const drainTimeout = 5 * time.Second

// followLog starts writing a container's log from its labels.
func (s *Service) followLog(id string, labels map[string]string) {
	if path, tty, ok := criLogOf(labels); ok {
		s.logs.Follow(id, path, tty)
	}
}

// criLogOf is the log file we write for a container, from its labels, and whether it has a TTY.
func criLogOf(labels map[string]string) (path string, tty, ok bool) {
	path, mode := labels[containerLogPathLabel], labels[logLabel]
	if path == "" || (mode != logCRI && mode != logCRIWithT) {
		return "", false, false
	}
	return path, mode == logCRIWithT, true
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
		if path, tty, ok := criLogOf(c.Labels); ok {
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
