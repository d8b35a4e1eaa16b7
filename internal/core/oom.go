package core

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/system"
	"github.com/sirupsen/logrus"
)

// sandboxOOMScoreAdj keeps the pause container alive under memory pressure, as dockershim did.
const sandboxOOMScoreAdj = -998

// capSysResource is the capability the kernel requires to lower oom_score_adj below 0.
const capSysResource = 24

// negativeOOMScoreAllowed tells, once at start, whether containers may get a negative
// oom_score_adj. Rootless Docker cannot, and neither can any runtime on a node whose capability
// bounding set lacks CAP_SYS_RESOURCE (nested or restricted VMs): runc then fails every such
// container with "can't get final child's PID from pipe: EOF". Docker runs on this node and
// shares our bounding set, so ours tells.
func negativeOOMScoreAllowed(info system.Info, log *logrus.Entry) bool {
	if reason := NegativeOOMScoreRefusal(info); reason != "" {
		log.Warnf("%s: negative oom_score_adj values (sandboxes: -998, Guaranteed pods) are clamped to 0", reason)
		return false
	}
	return true
}

// NegativeOOMScoreRefusal says why containers on this node cannot get a negative
// oom_score_adj, or "" when they can.
func NegativeOOMScoreRefusal(info system.Info) string {
	for _, opt := range info.SecurityOptions {
		if strings.Contains(opt, "name=rootless") {
			return "Docker runs rootless"
		}
	}
	if bnd, ok := boundingCapabilities(); ok && bnd&(1<<capSysResource) == 0 {
		return "this node's capability bounding set lacks CAP_SYS_RESOURCE"
	}
	return ""
}

// boundingCapabilities reads CapBnd of this process.
func boundingCapabilities() (uint64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// oomScoreAdj returns the value to give Docker for a wanted oom_score_adj.
func (s *Service) oomScoreAdj(want int64) int {
	if want < 0 && s.clampOOMScore {
		return 0
	}
	return int(want)
}

// oomKills remembers the containers Docker sent an oom event of, until they are removed:
// Docker 20.10 leaves State.OOMKilled false when containerd's TaskOOM comes after the task's
// exit (the kernel's kill raced the exit), but its oom event still comes.
type oomKills struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (o *oomKills) mark(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ids == nil {
		o.ids = map[string]struct{}{}
	}
	o.ids[id] = struct{}{}
}

func (o *oomKills) seen(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.ids[id]
	return ok
}

func (o *oomKills) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.ids, id)
}
