package doctor

import "github.com/cri-dockerd/cri-dockerd/internal/core"

// LimitChecks are one info line per pod feature Docker cannot give, with what a pod that asks
// for it gets: no node setting changes them.
func LimitChecks() []Check {
	var out []Check
	for _, l := range core.DockerLimits() {
		out = append(out, Check{Name: "not on Docker", Status: Info, Detail: l.Feature + ": " + l.Outcome})
	}
	return out
}
