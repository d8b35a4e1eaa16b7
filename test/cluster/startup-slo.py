#!/usr/bin/env python3
"""Kubernetes' pod startup SLO on a cluster: N pods per worker posted at once, latency from each
pod's creation to the watch showing it Running with every container started.

Usage: startup-slo.py KUBECTL KUBECONFIG WORKER... [--per-node 30] [--image IMAGE] [--timeout 600]
                     [--label LABEL]

The SLO (sig-scalability, "pod startup latency"): the 99th percentile of creation-to-Running as
observed by a watch, over stateless pods whose images are on the node, is at most 5 s. Both ends
are taken from one watch (kubectl get --watch) on the client: the first event of a pod (its
creation; the pods are posted in one request) and its first event with phase Running and every
container started. creationTimestamp has whole seconds only, so it is not used. The pods run
IMAGE (default the pause image the nodes hold), each worker's share held to it by a
nodeSelector (the scheduler still binds them), in a namespace of their own, removed at the end.

Prints "slo: ..." lines (p50, p90, p99, max; "slo LABEL: ..." with --label) and exits 0; 1
when pods did not all start in time. Then, per worker, where the time went as its kubelet saw it
(its /metrics through the API server's node proxy, over every pod the node started during this
run: the SLO's alone when nothing else runs): the mean pod start duration (first seen by the
kubelet to running) and the mean latency of its RunPodSandbox, CreateContainer and
StartContainer calls. It reports, it does not judge: the figures go to docs/benchmarks.md.
"""

import argparse
import json
import re
import subprocess
import sys
import threading
import time

NAMESPACE = "crid-startup-slo"


def percentile(values, p):
    s = sorted(values)
    # nearest rank, as the SLO's percentiles are stated
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


# Where a pod's start went, as the kubelet saw it (its /metrics, through the API server's node
# proxy): its pod start duration (first seen to running) and its CRI calls' latency.
KUBELET_METRIC = re.compile(r"(kubelet_runtime_operations_duration_seconds|kubelet_pod_start_duration_seconds)"
                            r"_(sum|count)(?:\{(.*)\})? (\S+)$")
KUBELET_OPS = ("run_podsandbox", "create_container", "start_container")


def kubelet_metrics(kc, node):
    """{(what, "sum"|"count"): value} for the pod start and each CRI operation; None when the
    kubelet's metrics cannot be read."""
    out = subprocess.run(kc + ["get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    got = {}
    for line in out.stdout.splitlines():
        m = KUBELET_METRIC.match(line)
        if not m:
            continue
        name, kind, labels, value = m.groups()
        op = re.search(r'operation_type="([^"]+)"', labels or "")
        what = op[1] if op else "pod start" if name == "kubelet_pod_start_duration_seconds" else None
        if what:
            got[(what, kind)] = got.get((what, kind), 0.0) + float(value)
    return got


def kubelet_breakdown(before, after):
    """"pod start 17.2 s (30), run_podsandbox 5.1 s (30), ...": each one's mean over this run."""
    parts = []
    for what in ("pod start",) + KUBELET_OPS:
        n = after.get((what, "count"), 0) - before.get((what, "count"), 0)
        if n > 0:
            mean = (after[(what, "sum")] - before.get((what, "sum"), 0)) / n
            parts.append(f"{what} {mean:.2f} s ({n:.0f})")
    return ", ".join(parts) or "no pod starts"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kubectl")
    ap.add_argument("kubeconfig")
    ap.add_argument("workers", nargs="+")
    ap.add_argument("--per-node", type=int, default=30)
    ap.add_argument("--image", default="registry.k8s.io/pause:3.10.2")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--label", default="", help="names the run in each line (slo LABEL: ...)")
    a = ap.parse_args()
    kc = [a.kubectl, "--kubeconfig", a.kubeconfig]

    subprocess.run(kc + ["delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(kc + ["create", "namespace", NAMESPACE], check=True, stdout=subprocess.DEVNULL)
    # The namespace's default service account must exist before pods are admitted.
    deadline = time.monotonic() + 60
    while subprocess.run(kc + ["-n", NAMESPACE, "get", "serviceaccount", "default"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        if time.monotonic() > deadline:
            sys.exit("slo: no default service account in the namespace within 60 s")
        time.sleep(0.5)

    pods = []
    for w in a.workers:
        for i in range(a.per_node):
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"slo-{w}-{i}", "labels": {"app": "startup-slo"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": w},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": a.image, "imagePullPolicy": "IfNotPresent",
                                    "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}],
                },
            })
    names = {p["metadata"]["name"] for p in pods}

    created, running = {}, {}
    lock = threading.Lock()
    watch = subprocess.Popen(
        kc + ["-n", NAMESPACE, "get", "pods", "--watch", "-o",
              'jsonpath={.metadata.name} {.status.phase} {.status.containerStatuses[*].started}{"\\n"}'],
        stdout=subprocess.PIPE, text=True, bufsize=1)

    def read():
        for line in watch.stdout:
            t = time.monotonic()
            parts = line.split()
            if not parts or parts[0] not in names:
                continue
            name, phase, started = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
            with lock:
                created.setdefault(name, t)
                if phase == "Running" and started and all(s == "true" for s in started):
                    running.setdefault(name, t)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(2)  # the watch is established (an empty list prints nothing)
    metrics_before = {w: kubelet_metrics(kc, w) for w in a.workers}
    t_post = time.monotonic()
    subprocess.run(kc + ["-n", NAMESPACE, "create", "-f", "-"], check=True, stdout=subprocess.DEVNULL,
                   input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}), text=True)
    t_posted = time.monotonic()
    deadline = t_post + a.timeout
    while time.monotonic() < deadline:
        with lock:
            if len(running) == len(names):
                break
        time.sleep(0.2)
    watch.terminate()
    with lock:
        lat = [running[n] - created[n] for n in running if n in created]
        missing = sorted(names - set(running))
    tag = f"slo {a.label}:" if a.label else "slo:"
    print(f"{tag} {len(pods)} pods ({a.per_node} per worker on {len(a.workers)} workers) posted in "
          f"{t_posted - t_post:.2f} s; {len(lat)} Running within {a.timeout:.0f} s")
    if lat:
        print(f"{tag} creation to Running (watch): p50 {percentile(lat, 50):.2f} s, p90 {percentile(lat, 90):.2f} s, "
              f"p99 {percentile(lat, 99):.2f} s, max {max(lat):.2f} s (the SLO: p99 <= 5 s)")
        last = max(running.values()) - t_post
        print(f"{tag} all Running {last:.2f} s after the post began")
    for w in a.workers:
        after = kubelet_metrics(kc, w) if metrics_before[w] is not None else None
        if after is None:
            print(f"{tag} the kubelet on {w}: its metrics could not be read")
        else:
            print(f"{tag} the kubelet on {w}, means over this run: {kubelet_breakdown(metrics_before[w], after)}")
    subprocess.run(kc + ["delete", "namespace", NAMESPACE, "--wait=false"], stdout=subprocess.DEVNULL)
    if missing:
        print(f"{tag} not Running: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
