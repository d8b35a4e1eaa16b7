//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The fault test: cri-dockerd is SIGKILLed at a random point of each of many pod
// lifecycles, then started again; the kubelet retries the call it was making and, later,
// stops and removes whatever the CRI lists. After each of these cleanups nothing may be left
// (Docker containers, checkpoints, netns pins, log position records, IP leases, veths, NAT
// rules, log files), and the CRI lists must be what Docker has, before and after the cleanup.
//
// CRID_FAULT_SEED replays a run (its seed is logged first); CRID_FAULT_ROUNDS changes the
// number of lifecycles (default 35, 7 per phase).

// lifecyclePhase is a CRI call of a pod's lifecycle during which cri-dockerd is killed.
type lifecyclePhase int

const (
	phaseRunPodSandbox lifecyclePhase = iota
	phaseCreateContainer
	phaseStartContainer
	phaseStopPodSandbox
	phaseRemovePodSandbox
	numPhases
	noKill lifecyclePhase = -1 // a step of the lifecycle that is never a kill point
)

func (p lifecyclePhase) String() string {
	return [...]string{"RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox", "RemovePodSandbox"}[p]
}

const faultDefaultRounds = 35

// faultPod is one pod driven through its lifecycle as the kubelet drives it.
type faultPod struct {
	d      *Daemon
	pods   *kubeletPods
	net    *ownCNI
	cfg    *runtimeapi.PodSandboxConfig
	ctr    *runtimeapi.ContainerConfig
	sbID   string
	ctrID  string
	sbIDs  []string // every sandbox ID the CRI returned (a retried RunPodSandbox makes another)
	ctrIDs []string
	// kubeletOrder: StopContainer before StopPodSandbox and RemoveContainer before
	// RemovePodSandbox, as the kubelet does; else the sandbox calls stop and remove the
	// container themselves (crictl rmp -f).
	kubeletOrder bool
}

type lifecycleStep struct {
	phase lifecyclePhase
	name  string
	do    func(ctx context.Context) error
}

func (p *faultPod) runSandbox(ctx context.Context) error {
	resp, err := p.d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: p.cfg})
	if err == nil {
		p.sbID = resp.PodSandboxId
		p.sbIDs = append(p.sbIDs, p.sbID)
	}
	return err
}

func (p *faultPod) createContainer(ctx context.Context) error {
	resp, err := p.d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.sbID, Config: p.ctr, SandboxConfig: p.cfg})
	if err == nil {
		p.ctrID = resp.ContainerId
		p.ctrIDs = append(p.ctrIDs, p.ctrID)
	}
	return err
}

func (p *faultPod) startContainer(ctx context.Context) error {
	_, err := p.d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.ctrID})
	return err
}

func (p *faultPod) stopSandbox(ctx context.Context) error {
	_, err := p.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.sbID})
	return err
}

func (p *faultPod) removeSandbox(ctx context.Context) error {
	_, err := p.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.sbID})
	return err
}

// removeLog removes the container's log file, as the kubelet does before it removes a
// container (and, with its pod's log directory, for the containers RemovePodSandbox removes).
func (p *faultPod) removeLog(ctx context.Context) error {
	st, err := p.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.ctrID})
	if err != nil {
		return err
	}
	if err := os.Remove(st.Status.LogPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (p *faultPod) steps() []lifecycleStep {
	steps := []lifecycleStep{
		{phaseRunPodSandbox, "RunPodSandbox", p.runSandbox},
		{phaseCreateContainer, "CreateContainer", p.createContainer},
		{phaseStartContainer, "StartContainer", p.startContainer},
	}
	if p.kubeletOrder {
		steps = append(steps, lifecycleStep{noKill, "StopContainer", func(ctx context.Context) error {
			_, err := p.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.ctrID, Timeout: 10})
			return err
		}})
	}
	steps = append(steps,
		lifecycleStep{phaseStopPodSandbox, "StopPodSandbox", p.stopSandbox},
		lifecycleStep{noKill, "remove the log file", p.removeLog})
	if p.kubeletOrder {
		steps = append(steps, lifecycleStep{noKill, "RemoveContainer", func(ctx context.Context) error {
			_, err := p.d.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: p.ctrID})
			return err
		}})
	}
	return append(steps, lifecycleStep{phaseRemovePodSandbox, "RemovePodSandbox", p.removeSandbox})
}

// retry makes again, after the restart, the call that the kill interrupted, as the kubelet
// does when a call fails, and checks that it did its work.
func (p *faultPod) retry(t *testing.T, ctx context.Context, phase lifecyclePhase) {
	t.Helper()
	var err error
	switch phase {
	case phaseRunPodSandbox:
		err = p.runSandbox(ctx)
	case phaseCreateContainer:
		err = p.createContainer(ctx)
	case phaseStartContainer:
		err = p.startContainer(ctx)
	case phaseStopPodSandbox:
		err = p.stopSandbox(ctx)
	case phaseRemovePodSandbox:
		err = p.removeSandbox(ctx)
	}
	if err != nil {
		t.Errorf("%s retried after the restart: %v", phase, err)
		return
	}
	switch phase {
	case phaseRunPodSandbox:
		st, err := p.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sbID})
		if err != nil {
			t.Errorf("PodSandboxStatus of the retried sandbox: %v", err)
		} else if ip := net.ParseIP(st.Status.GetNetwork().GetIp()); st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || ip == nil || !mustSubnet(p.net.Subnet).Contains(ip) {
			t.Errorf("the retried sandbox is %v with IP %q, want READY on %s", st.Status.State, st.Status.GetNetwork().GetIp(), p.net.Subnet)
		}
	case phaseCreateContainer, phaseStartContainer:
		want := runtimeapi.ContainerState_CONTAINER_CREATED
		if phase == phaseStartContainer {
			want = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		if st, err := p.d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.ctrID}); err != nil || st.Status.State != want {
			t.Errorf("after the retried %s the container is %v (%v), want %v", phase, st.GetStatus().GetState(), err, want)
		}
	case phaseStopPodSandbox:
		st, err := p.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sbID})
		if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("after the retried StopPodSandbox the sandbox is %v (%v), want NOTREADY", st.GetStatus().GetState(), err)
		}
		for ip, owner := range p.net.Leases(t) {
			if owner == p.sbID {
				t.Errorf("the stopped sandbox still holds %s", ip)
			}
		}
	case phaseRemovePodSandbox:
		_, err := p.d.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sbID})
		if status.Code(err) != codes.NotFound {
			t.Errorf("PodSandboxStatus after the retried RemovePodSandbox: %v, want NotFound", err)
		}
		if left := p.pods.podContainers(t, p.cfg.Metadata); len(left) > 0 {
			t.Errorf("after the retried RemovePodSandbox Docker still has %d containers of the pod", len(left))
		}
	}
}

// killOutcome is where a kill landed in the call it interrupted.
type killOutcome struct {
	phase    lifecyclePhase
	delay    time.Duration
	inFlight bool // the call had not answered (it failed with the connection)
}

// faultSeed is CRID_FAULT_SEED, or a new seed.
func faultSeed(t *testing.T) uint64 {
	if s := os.Getenv("CRID_FAULT_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRID_FAULT_SEED=%q: %v", s, err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

func faultRounds(t *testing.T) int {
	rounds := faultDefaultRounds
	if s := os.Getenv("CRID_FAULT_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < int(numPhases) {
			t.Fatalf("CRID_FAULT_ROUNDS=%q: want a number of at least %d", s, numPhases)
		}
		rounds = n
	}
	return rounds
}

func TestSIGKILLAtRandomPointsOfPodLifecyclesLeavesNothing(t *testing.T) {
	started := time.Now()
	seed, rounds := faultSeed(t), faultRounds(t)
	t.Logf("seed %d (replay: CRID_FAULT_SEED=%d), %d lifecycles", seed, seed, rounds)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	// Everything random is drawn first: a replay does not depend on what the run does.
	type plan struct {
		phase        lifecyclePhase
		frac         float64 // the kill comes after this fraction of the call's usual duration
		kubeletOrder bool
	}
	plans := make([]plan, rounds)
	for i := range plans {
		plans[i].phase = lifecyclePhase(i % int(numPhases))
	}
	r.Shuffle(len(plans), func(i, j int) { plans[i], plans[j] = plans[j], plans[i] })
	for i := range plans {
		plans[i].frac, plans[i].kubeletOrder = r.Float64(), r.IntN(2) == 0
	}

	pd := ownDockerd(t)
	n := newOwnCNI(t, "kill")
	pods := newKubeletPods(t, "kill", pd.Client)
	d := NewDaemon(t, "--docker-endpoint", pd.Host, "--network-plugin=cni", "--cni-conf-dir", n.ConfDir, "--cni-bin-dir", cniBinDir)
	// Kill waits for the CNI plugins it was running. Killing them too (KillMode=control-group)
	// would find the bridge plugin's DEL not crash-safe: it deletes the pod's interface, then
	// removes the masquerade rules of the addresses it found on it, so a DEL killed in between
	// leaves rules that no later DEL finds.
	d.ProcessGroup = true
	d.Start()
	var all []*runtimeapi.PodSandboxConfig

	newPod := func(name string, kubeletOrder bool) *faultPod {
		cfg := pods.Pod(t, name)
		cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: int32(freeHostPort(t))}}
		all = append(all, cfg)
		return &faultPod{d: d, pods: pods, net: n, cfg: cfg, ctr: pods.Container(t, cfg, "app"), kubeletOrder: kubeletOrder}
	}
	// checkClean runs after each kubelet cleanup: the lists are empty and equal to Docker's,
	// nothing is left.
	checkClean := func(when string, p *faultPod, seen []string) {
		t.Helper()
		if v := pods.checkListsMatchDocker(t, d, when+", after the cleanup"); len(v.Sandboxes)+len(v.Containers) > 0 {
			t.Errorf("%s: after the cleanup Docker still has %v", when, v)
		}
		pods.checkNothingLeftOf(t, d, n, []*runtimeapi.PodSandboxConfig{p.cfg}, seen, when)
	}

	// Calibration: three whole lifecycles, unharmed, time each call; the kills come at a
	// random fraction of the median (the first lifecycle pays for the bridge's creation).
	timings := map[lifecyclePhase][]time.Duration{}
	for i := 0; i < 3; i++ {
		p := newPod(fmt.Sprintf("calib-%d", i), true)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, s := range p.steps() {
			start := time.Now()
			if err := s.do(ctx); err != nil {
				t.Fatalf("calibration lifecycle %d: %s: %v", i, s.name, err)
			}
			if s.phase != noKill {
				timings[s.phase] = append(timings[s.phase], time.Since(start))
			}
		}
		cancel()
		checkClean(fmt.Sprintf("calibration lifecycle %d", i), p, append(p.sbIDs, p.ctrIDs...))
	}
	usual := map[lifecyclePhase]time.Duration{}
	for ph, ds := range timings {
		slices.Sort(ds)
		usual[ph] = ds[len(ds)/2]
	}
	var calib []string
	for ph := phaseRunPodSandbox; ph < numPhases; ph++ {
		calib = append(calib, fmt.Sprintf("%s %v", ph, usual[ph].Round(time.Millisecond)))
	}
	t.Logf("usual durations: %s", strings.Join(calib, ", "))
	if t.Failed() {
		t.FailNow()
	}

	var outcomes []killOutcome
	var slowest time.Duration
	for i, pl := range plans {
		roundStart := time.Now()
		p := newPod(fmt.Sprintf("kill-%02d", i), pl.kubeletOrder)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out := killOutcome{phase: pl.phase, delay: time.Duration(pl.frac * float64(usual[pl.phase]))}
		for _, s := range p.steps() {
			if s.phase != pl.phase {
				if err := s.do(ctx); err != nil {
					t.Fatalf("round %d: %s: %v (replay: CRID_FAULT_SEED=%d)", i, s.name, err, seed)
				}
				continue
			}
			result := make(chan error, 1)
			go func() { result <- s.do(ctx) }()
			time.Sleep(out.delay)
			d.Kill()
			err := <-result
			out.inFlight = err != nil
			break
		}
		outcomes = append(outcomes, out)
		landed := "after its reply"
		if out.inFlight {
			landed = "in flight"
		}
		d.Start()
		p.retry(t, ctx, pl.phase)
		before := pods.checkListsMatchDocker(t, d, fmt.Sprintf("round %d, after the restart", i))
		pods.kubeletCleanup(t, d)
		seen := before.ids()
		for _, id := range append(p.sbIDs, p.ctrIDs...) {
			if _, listed := before.Sandboxes[id]; !listed {
				if _, listed := before.Containers[id]; !listed {
					seen = append(seen, id)
				}
			}
		}
		checkClean(fmt.Sprintf("round %d (%s)", i, pl.phase), p, seen)
		cancel()
		took := time.Since(roundStart)
		slowest = max(slowest, took)
		t.Logf("round %2d: kill %3.0f%% (%v) into %s, %s; kubelet order %v; %d sandboxes, %d containers cleaned up; %v",
			i, 100*pl.frac, out.delay.Round(time.Millisecond), pl.phase, landed, pl.kubeletOrder,
			len(before.Sandboxes), len(before.Containers), took.Round(time.Millisecond))
		if t.Failed() {
			t.Fatalf("round %d failed (replay: CRID_FAULT_SEED=%d)", i, seed)
		}
	}

	var summary []string
	for ph := phaseRunPodSandbox; ph < numPhases; ph++ {
		kills, inFlight := 0, 0
		for _, o := range outcomes {
			if o.phase == ph {
				kills++
				if o.inFlight {
					inFlight++
				}
			}
		}
		summary = append(summary, fmt.Sprintf("%s %d (%d in flight)", ph, kills, inFlight))
	}
	t.Logf("%d lifecycles killed: %s; slowest round %v; %v in all (seed %d)",
		len(outcomes), strings.Join(summary, ", "), slowest.Round(time.Millisecond), time.Since(started).Round(time.Second), seed)
}
