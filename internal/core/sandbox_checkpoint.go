package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/cri-dockerd/cri-dockerd/internal/network"
)

// checkpointVersion is the format of sandbox checkpoint files; a reader refuses others.
const checkpointVersion = 1

// Checkpoint states: the network is being set up (written before the CNI ADD, so that a crash
// in between still leaves what a DEL needs), or it is up and the pod's IPs are known.
const (
	checkpointSettingUp = "setting-up"
	checkpointReady     = "ready"
)

// sandboxCheckpoint is what Docker cannot hold for a sandbox: how its network was attached (for
// the DEL, also after the container is gone) and its IPs (for PodSandboxStatus, without
// entering the pod's namespace). One JSON file per sandbox, <root>/sandboxes/<id>.json:
//
//	{"version":1,"sandboxId":"…","state":"ready",
//	 "network":{"plugin":"cni","network":"cri-dockerd","ifName":"eth0","ips":["10.88.0.7"],…}}
type sandboxCheckpoint struct {
	Version   int                 `json:"version"`
	SandboxID string              `json:"sandboxId"`
	State     string              `json:"state"`
	Network   *network.Attachment `json:"network"`
}

// checkpointStore keeps the checkpoint files of one directory. Writes are atomic (temporary
// file, fsync, rename, fsync of the directory): a reader sees the old file or the new one.
type checkpointStore struct {
	dir string
	// writes counts puts and removes, once before the file changes and once after: a list
	// built from the directory can be given again while it stays the same (keptListCache).
	writes atomic.Uint64
}

func newCheckpointStore(dir string) (*checkpointStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	return &checkpointStore{dir: dir}, nil
}

func (s *checkpointStore) path(id string) string {
	return filepath.Join(s.dir, id+".json")
}

// validCheckpointID keeps an ID from naming a file outside the directory.
func validCheckpointID(id string) bool {
	return id != "" && !strings.ContainsAny(id, `/\`) && id != "." && id != ".."
}

// put writes the checkpoint of cp.SandboxID.
func (s *checkpointStore) put(cp *sandboxCheckpoint) error {
	if !validCheckpointID(cp.SandboxID) {
		return fmt.Errorf("checkpoint: bad sandbox id %q", cp.SandboxID)
	}
	cp.Version = checkpointVersion
	data, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	s.writes.Add(1)
	defer s.writes.Add(1)
	if err := writeFileAtomic(s.path(cp.SandboxID), data); err != nil {
		return fmt.Errorf("checkpoint of sandbox %s: %w", cp.SandboxID, err)
	}
	return nil
}

// writeFileAtomic replaces path with data: a temporary file in the same directory, fsync,
// rename over path, fsync of the directory. Readers see the old content or the new, and after a
// crash the file is one of the two.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// removeTemporaries deletes the temporary files of writes that a crash interrupted.
func (s *checkpointStore) removeTemporaries() {
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}

// get reads the checkpoint of sandbox id; nil without error when there is none.
func (s *checkpointStore) get(id string) (*sandboxCheckpoint, error) {
	if !validCheckpointID(id) {
		return nil, nil
	}
	data, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint of sandbox %s: %w", id, err)
	}
	cp, err := decodeCheckpoint(id, data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of sandbox %s (%s): %w", id, s.path(id), err)
	}
	return cp, nil
}

// decodeCheckpoint reads the bytes of sandbox id's checkpoint file.
func decodeCheckpoint(id string, data []byte) (*sandboxCheckpoint, error) {
	var cp sandboxCheckpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, err
	}
	if cp.Version != checkpointVersion {
		return nil, fmt.Errorf("version %d, this cri-dockerd reads version %d", cp.Version, checkpointVersion)
	}
	if cp.SandboxID != id || cp.Network == nil {
		return nil, errors.New("it is not this sandbox's")
	}
	return &cp, nil
}

// remove deletes the checkpoint of sandbox id; a missing one is fine.
func (s *checkpointStore) remove(id string) error {
	if !validCheckpointID(id) {
		return nil
	}
	s.writes.Add(1)
	defer s.writes.Add(1)
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint of sandbox %s: %w", id, err)
	}
	return syncDir(s.dir)
}

// ids lists the sandboxes that have a checkpoint.
func (s *checkpointStore) ids() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && !strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".json") {
			out = append(out, strings.TrimSuffix(name, ".json"))
		}
	}
	return out, nil
}

// resolve finds the full ID of the checkpointed sandbox that id names in full or by a unique
// prefix (crictl passes prefixes); "" when none does.
func (s *checkpointStore) resolve(id string) (string, error) {
	if !validCheckpointID(id) {
		return "", nil
	}
	if _, err := os.Stat(s.path(id)); err == nil {
		return id, nil
	}
	all, err := s.ids()
	if err != nil {
		return "", err
	}
	match := ""
	for _, candidate := range all {
		if strings.HasPrefix(candidate, id) {
			if match != "" {
				return "", fmt.Errorf("sandbox id prefix %q matches more than one checkpoint", id)
			}
			match = candidate
		}
	}
	return match, nil
}
