//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/testutil"
)

// The concurrency test: 100 pods started at once (RunPodSandbox, then each pod's
// container created and started), then all stopped and removed at once, on a CNI network of
// the test's own. Every call succeeds, every pod gets an address of its own, and afterwards
// nothing is left (containers, checkpoints, pins, log records, leases, veths, NAT rules, log
// files) and the daemon's goroutines, read from its pprof endpoint, come back to what they were
// before.

const (
	concurrencyTestPods = 100
	// goroutineSlack allows for what comes and goes on its own (a keep-alive of Docker's
	// client, the stats refresh, the pprof request itself).
	goroutineSlack = 5
	// goroutineSettle bounds the wait for the goroutines to come back: a bound on a leak, not
	// on speed.
	goroutineSettle = time.Minute
)

// goroutineSampler reads the daemon's goroutine count in the background and keeps the peak.
type goroutineSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak int
}

func sampleGoroutines(t *testing.T, addr string) *goroutineSampler {
	s := &goroutineSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if n, _, err := fetchGoroutines(addr); err == nil {
				s.mu.Lock()
				s.peak = max(s.peak, n)
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { s.Stop() })
	return s
}

// Stop ends the sampling and returns the peak.
func (s *goroutineSampler) Stop() int {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// settledGoroutines waits until the daemon's goroutine count stays the same for five reads in
// a row, 200 ms apart, and returns it with its dump.
func settledGoroutines(t *testing.T, addr string) (int, string) {
	t.Helper()
	// last starts at -1, a count no read returns, so the first read sets same to 0.
	last, dump, same := -1, "", -1
	if !testutil.PollUntil(goroutineSettle, 200*time.Millisecond, func() bool {
		n, d := goroutineDump(t, addr)
		if n == last {
			same++
		} else {
			same = 0
		}
		last, dump = n, d
		return same >= 5
	}) {
		t.Logf("the goroutine count did not settle within %v; taking %d", goroutineSettle, last)
	}
	return last, dump
}

func TestConcurrentRunAndRemovalOf100PodsLeavesNothing(t *testing.T) {
	pd := ownDockerd(t)
	n := newOwnCNI(t, "conc")
	k := newKubeletPods(t, "conc", pd.Client)
	d := StartDaemon(t, "--docker-endpoint", pd.Host, "--network-plugin=cni", "--cni-conf-dir", n.ConfDir, "--cni-bin-dir", cniBinDir, "--metrics-bind-addr", "127.0.0.1:0", "--enable-pprof")
	addr := metricsAddr(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	type pod struct {
		cfg        *runtimeapi.PodSandboxConfig
		ctr        *runtimeapi.ContainerConfig
		id, ctrID  string
		runErr     error
		removalErr error
	}
	newPod := func(name string) *pod {
		cfg := k.Pod(t, name)
		return &pod{cfg: cfg, ctr: k.Container(t, cfg, "app")}
	}
	run := func(p *pod) error {
		resp, err := d.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: p.cfg})
		if err != nil {
			return fmt.Errorf("RunPodSandbox: %w", err)
		}
		p.id = resp.PodSandboxId
		c, err := d.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: p.ctr, SandboxConfig: p.cfg})
		if err != nil {
			return fmt.Errorf("CreateContainer: %w", err)
		}
		p.ctrID = c.ContainerId
		if _, err := d.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.ctrID}); err != nil {
			return fmt.Errorf("StartContainer: %w", err)
		}
		return nil
	}
	remove := func(p *pod) error {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
			return fmt.Errorf("StopPodSandbox: %w", err)
		}
		// The kubelet removes a container's log before the container.
		st, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.ctrID})
		if err != nil {
			return fmt.Errorf("ContainerStatus: %w", err)
		}
		if err := os.Remove(st.Status.LogPath); err != nil {
			return err
		}
		if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
			return fmt.Errorf("RemovePodSandbox: %w", err)
		}
		return nil
	}
	// all runs f for every pod at once, released together.
	all := func(pods []*pod, f func(*pod)) time.Duration {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, p := range pods {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f(p)
			}()
		}
		began := time.Now()
		close(start)
		wg.Wait()
		return time.Since(began)
	}

	// A whole life first, so that what starts on first use (Docker's event watcher, the stats
	// collector, the network plugin's state) is in the baseline.
	warm := newPod("warm")
	if err := run(warm); err != nil {
		t.Fatalf("warm-up pod: %v", err)
	}
	if err := remove(warm); err != nil {
		t.Fatalf("warm-up pod: %v", err)
	}
	baseline, baselineDump := settledGoroutines(t, addr)
	sampler := sampleGoroutines(t, addr)

	pods := make([]*pod, concurrencyTestPods)
	for i := range pods {
		pods[i] = newPod(fmt.Sprintf("conc-%03d", i))
	}
	runTook := all(pods, func(p *pod) { p.runErr = run(p) })
	failed := 0
	for _, p := range pods {
		if p.runErr != nil {
			failed++
			if failed <= 10 {
				t.Errorf("pod %s: %v", p.cfg.Metadata.Name, p.runErr)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d pods failed to start", failed, len(pods))
	}
	running, _ := goroutineDump(t, addr)

	// Every pod runs, listed as Docker has it, with an address of its own that host-local
	// leases to it.
	view := k.checkListsMatchDocker(t, d, "with the pods running")
	ready, ips := 0, map[string]string{}
	leases := n.Leases(t)
	for _, p := range pods {
		if view.Sandboxes[p.id] == runtimeapi.PodSandboxState_SANDBOX_READY && view.Containers[p.ctrID] == runtimeapi.ContainerState_CONTAINER_RUNNING {
			ready++
		}
		ip := sandboxIP(t, d, p.id)
		if net.ParseIP(ip) == nil || !mustSubnet(n.Subnet).Contains(net.ParseIP(ip)) {
			t.Errorf("pod %s has IP %q, not on %s", p.cfg.Metadata.Name, ip, n.Subnet)
		} else if other, dup := ips[ip]; dup {
			t.Errorf("pods %s and %s both have IP %s", other, p.cfg.Metadata.Name, ip)
		} else if leases[ip] != p.id {
			t.Errorf("pod %s has IP %s, whose lease is %q's", p.cfg.Metadata.Name, ip, leases[ip])
		}
		ips[ip] = p.cfg.Metadata.Name
	}
	if ready != len(pods) || len(view.Sandboxes) != len(pods) || len(leases) != len(pods) {
		t.Errorf("%d of %d pods ready with their container running; %d sandboxes listed, %d leases", ready, len(pods), len(view.Sandboxes), len(leases))
	}

	removeTook := all(pods, func(p *pod) { p.removalErr = remove(p) })
	for _, p := range pods {
		if p.removalErr != nil {
			t.Errorf("pod %s: %v", p.cfg.Metadata.Name, p.removalErr)
		}
	}
	peak := sampler.Stop()

	var ids []string
	var cfgs []*runtimeapi.PodSandboxConfig
	for _, p := range append(pods, warm) {
		ids = append(ids, p.id, p.ctrID)
		cfgs = append(cfgs, p.cfg)
	}
	if v := k.checkListsMatchDocker(t, d, "after the removal"); len(v.Sandboxes)+len(v.Containers) > 0 {
		t.Errorf("after the removal Docker still has %v", v)
	}
	k.checkNothingLeftOf(t, d, n, cfgs, ids, "after the removal")

	// The goroutines come back to the baseline. Bounded, so that a leak fails rather than
	// hangs: the wait is for the last followers and streams to end.
	var after int
	var afterDump string
	testutil.PollUntil(goroutineSettle, 200*time.Millisecond, func() bool {
		after, afterDump = goroutineDump(t, addr)
		return after <= baseline+goroutineSlack
	})
	t.Logf("%d pods: run+create+start %v, stop+remove %v; goroutines: baseline %d, %d with the pods running, peak %d, after %d",
		len(pods), runTook.Round(time.Millisecond), removeTook.Round(time.Millisecond), baseline, running, peak, after)
	if after > baseline+goroutineSlack {
		t.Errorf("goroutines did not come back: %d before the pods, %d after them (slack %d)\n--- before:\n%s\n--- after:\n%s",
			baseline, after, goroutineSlack, baselineDump, afterDump)
	}
}
