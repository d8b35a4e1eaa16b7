package core

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/checkpointarchive"
)

// CheckpointContainer (the kubelet's forensic container checkpointing) dumps a running
// container with Docker's checkpoints (CRIU, behind dockerd's "experimental") and writes the
// archive containerd and CRI-O write at the location the kubelet names, which must be in
// Options.CheckpointDirectory. The container keeps running. Without Docker's checkpoints the
// answer is Unimplemented, saying what the node lacks.
func (s *Service) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	id := req.GetContainerId()
	if id == "" {
		return nil, invalidf("container_id is required")
	}
	location, err := s.checkpointLocation(req.GetLocation())
	if err != nil {
		return nil, err
	}
	if req.Timeout < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	if err := s.checkpointSupport(ctx); err != nil {
		return nil, err
	}
	c, err := s.inspectCRIContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.State == nil || !c.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is not running: only a running container can be checkpointed", id)
	}
	spec, err := checkpointarchive.BundleSpec(s.stats.Host().Proc(), c.State.Pid)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q: %v", id, err)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(boundedSeconds(req.Timeout))*time.Second)
		defer cancel()
	}
	work := filepath.Join(s.opts.RootDirectory, "checkpoint-work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "checkpoint of %q: %v", id, err)
	}
	dir, err := os.MkdirTemp(work, c.ID[:12]+"-")
	if err != nil {
		return nil, status.Errorf(codes.Internal, "checkpoint of %q: %v", id, err)
	}
	defer os.RemoveAll(dir)
	at := time.Now().UTC()
	const dump = "criu"
	if err := s.docker.CheckpointContainer(ctx, c.ID, dump, dir); err != nil {
		return nil, dockerError(err, "checkpoint container %q", id)
	}
	name, _ := parseName(c.Name)
	upper := ""
	if c.GraphDriver.Data != nil {
		upper = c.GraphDriver.Data["UpperDir"]
	}
	if upper == "" {
		upper = s.layers.snapshotUpperDir(ctx, c.ID)
	}
	err = checkpointarchive.Write(ctx, location, checkpointarchive.Contents{
		CriuDir: filepath.Join(dir, dump),
		Spec:    spec,
		Config: checkpointarchive.Config{
			ID: c.ID, Name: name.container,
			RootfsImage: specifiedImage(c.Config.Image, c.Config.Labels), RootfsImageRef: c.Image, RootfsImageName: c.Config.Image,
			OCIRuntime: c.HostConfig.Runtime, CreatedTime: time.Unix(0, parseDockerTime(c.Created)).UTC(), CheckpointedAt: at,
		},
		UpperDir: upper,
		StageDir: dir,
	})
	if errors.Is(err, fs.ErrExist) {
		return nil, status.Errorf(codes.AlreadyExists, "checkpoint of %q: %s exists", id, location)
	}
	if errors.Is(err, checkpointarchive.ErrSparse) {
		return nil, status.Errorf(codes.ResourceExhausted, "checkpoint of %q: %v", id, err)
	}
	if ctx.Err() != nil { // the request's timeout, or its caller gone
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "checkpoint of %q: %v", id, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "checkpoint of %q: write %s: %v", id, location, err)
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// checkpointLocation checks the archive's path: absolute and clean, a file directly in the
// checkpoint directory (which must exist, with no symlink on the way), not there yet. A
// request never makes us write elsewhere (docs/security.md).
func (s *Service) checkpointLocation(location string) (string, error) {
	dir := s.opts.CheckpointDirectory
	if dir == "" {
		return "", status.Error(codes.FailedPrecondition, "checkpoints are off: --checkpoint-directory is empty")
	}
	if location == "" || !filepath.IsAbs(location) || filepath.Clean(location) != location || filepath.Dir(location) != dir {
		return "", invalidf("location %q: a checkpoint archive must be a file directly in %s (--checkpoint-directory)", location, dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", status.Errorf(codes.FailedPrecondition, "checkpoint directory %s: %v (the kubelet creates it)", dir, err)
	}
	if real != dir {
		return "", status.Errorf(codes.FailedPrecondition, "checkpoint directory %s leads through a symlink to %s", dir, real)
	}
	if _, err := os.Lstat(location); err == nil {
		return "", status.Errorf(codes.AlreadyExists, "location %s exists", location)
	}
	return location, nil
}

// lookCriu finds CRIU as runc will, on this node; a variable for tests.
var lookCriu = func() error { _, err := exec.LookPath("criu"); return err }

// checkpointSupport fails with what the node lacks for Docker's checkpoints.
func (s *Service) checkpointSupport(ctx context.Context) error {
	info, err := s.runtimes.get(ctx)
	if err != nil {
		return dockerError(err, "read Docker's /info")
	}
	if !info.ExperimentalBuild {
		return status.Errorf(codes.Unimplemented, "CheckpointContainer needs Docker's checkpoints, which Docker %s serves only in experimental mode: "+
			`set "experimental": true in /etc/docker/daemon.json, restart dockerd, and install CRIU (apt install criu)`, info.ServerVersion)
	}
	if err := lookCriu(); err != nil {
		return status.Errorf(codes.Unimplemented, "CheckpointContainer needs CRIU on this node, which runc runs to dump the container: %v (apt install criu)", err)
	}
	return nil
}
