// Package procuser reads the identity a container's first process runs with: the uid, gid and
// supplemental groups of /proc/PID/status, which the kubelet shows as a container status's
// user (SupplementalGroupsPolicy). Docker keeps no record of them: the groups a process gets
// come from the image's /etc/group at start, which only the runtime reads.
package procuser

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// User is a process's real uid and gid and its supplemental groups.
type User struct {
	UID, GID int64
	Groups   []int64
}

// Read reads process pid's identity from proc, the host's procfs. It refuses a process that is
// not the container's own: one in no cgroup named for containerID (a VM runtime's PID is one of
// its guest), or a gVisor sandbox (runsc), whose container processes are not host processes.
func Read(proc string, pid int, containerID string) (User, error) {
	if pid <= 0 || containerID == "" {
		return User{}, fmt.Errorf("no process to read: pid %d, container %q", pid, containerID)
	}
	dir := filepath.Join(proc, strconv.Itoa(pid))
	cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return User{}, err
	}
	if !bytes.Contains(cgroups, []byte(containerID)) {
		return User{}, fmt.Errorf("process %d is in no cgroup of container %s", pid, containerID)
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil && strings.HasPrefix(filepath.Base(exe), "runsc") {
		return User{}, fmt.Errorf("process %d is a gVisor sandbox (%s)", pid, exe)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return User{}, err
	}
	return parseStatus(raw)
}

// parseStatus reads the Uid, Gid and Groups lines of a /proc/PID/status.
func parseStatus(raw []byte) (User, error) {
	var u User
	var haveUID, haveGID bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		var err error
		switch key {
		case "Uid":
			haveUID = len(fields) > 0
			if haveUID {
				u.UID, err = strconv.ParseInt(fields[0], 10, 64)
			}
		case "Gid":
			haveGID = len(fields) > 0
			if haveGID {
				u.GID, err = strconv.ParseInt(fields[0], 10, 64)
			}
		case "Groups":
			for _, f := range fields {
				g, gerr := strconv.ParseInt(f, 10, 64)
				if gerr != nil {
					err = gerr
					break
				}
				u.Groups = append(u.Groups, g)
			}
		}
		if err != nil {
			return User{}, fmt.Errorf("status line %q: %w", sc.Text(), err)
		}
	}
	if !haveUID || !haveGID {
		return User{}, fmt.Errorf("status has no Uid or Gid line")
	}
	return u, nil
}

// Cache keeps what was read of each container while it ran: an exited container has no
// process left to read, and its status still shows who it ran as. Lost on restart.
type Cache struct {
	mu    sync.Mutex
	users map[string]User
}

// Put records container id's user.
func (c *Cache) Put(id string, u User) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		c.users = map[string]User{}
	}
	c.users[id] = u
}

// Get is what Put recorded for container id.
func (c *Cache) Get(id string) (User, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.users[id]
	return u, ok
}

// Forget drops container id (removed).
func (c *Cache) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.users, id)
}
