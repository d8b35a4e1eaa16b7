#!/usr/bin/env python3
"""Pod startup density through a real kubelet, in the spirit of Kubernetes' node e2e density test.

Run by run.sh (E2E_DENSITY=COUNTS) once its kubelet's node is Ready. For each count N it posts N
BestEffort busybox pods to the API server, 8 POSTs at a time, and times each pod from the start
of its POST to the watch event that shows it Running. With the last batch still running it
samples the idle CPU of dockerd, its containerd and the CRI runtime for IDLE seconds, and reads
the kubelet's runtime_operations_duration_seconds (which CRI calls the kubelet made, and how long
they took). Then it deletes the batch and waits until the kubelet has stopped every sandbox.

Writes one JSON document (OUT) with, per batch: p50, p99, max and wall seconds, the kubelet's
per-operation counts and mean seconds, and the CPU seconds the whole machine spent meanwhile, by
process name (the share of all CPUs busy, and who used them); plus the idle CPU in ms per
process.
"""
import argparse
import concurrent.futures
import json
import os
import re
import ssl
import subprocess
import threading
import time
import urllib.request

CTX = ssl.create_default_context()
CTX.check_hostname = False
CTX.verify_mode = ssl.CERT_NONE


class API:
    def __init__(self, server, token, namespace):
        self.server, self.token, self.ns = server, token, namespace

    def request(self, method, path, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(req, context=CTX, timeout=timeout)

    def pods_path(self):
        return "/api/v1/namespaces/%s/pods" % self.ns


def pod(name, batch, image, node):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"density": batch}},
        "spec": {
            "nodeName": node,  # no scheduler here
            "automountServiceAccountToken": False,  # no controller manager: no kube-root-ca.crt
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": image, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            }],
        },
    }


def percentile(values, p):
    s = sorted(values)
    if not s:
        return None
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


class Watcher(threading.Thread):
    """Records, per pod name, the first time a watch event shows the pod Running."""

    def __init__(self, api, batch):
        super().__init__(daemon=True)
        self.api, self.batch = api, batch
        self.running = {}
        self.ready = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        path = self.api.pods_path() + "?watch=true&labelSelector=density%3D" + self.batch
        with self.api.request("GET", path, timeout=3600) as resp:
            self.ready.set()
            for line in resp:
                now = time.monotonic()
                ev = json.loads(line)
                obj = ev.get("object", {})
                name = obj.get("metadata", {}).get("name")
                if obj.get("status", {}).get("phase") == "Running":
                    with self.lock:
                        self.running.setdefault(name, now)

    def count(self):
        with self.lock:
            return len(self.running)


def histogram_ops(metrics_url, metric, label):
    """Sums and counts of the histogram metric per value of label, from a /metrics URL."""
    ops = {}
    if not metrics_url:
        return ops
    try:
        text = urllib.request.urlopen(metrics_url, context=CTX, timeout=30).read().decode()
    except Exception as e:  # the figures are a report, not a check
        return {"error": str(e)}
    for line in text.splitlines():
        for kind in ("sum", "count"):
            prefix = metric + "_" + kind + "{"
            if line.startswith(prefix):
                labels, value = line[len(prefix):].rsplit("} ", 1)
                # Label values may hold commas and spaces ("GET /containers/{id}/json").
                pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
                op = dict(pairs).get(label, "?")
                ops.setdefault(op, {})[kind] = float(value)
    return ops


def kubelet_runtime_ops(metrics_url):
    """Sums and counts of kubelet_runtime_operations_duration_seconds per operation type."""
    return histogram_ops(metrics_url, "kubelet_runtime_operations_duration_seconds", "operation_type")


def docker_ops(metrics_url):
    """Ours only: the Docker calls it made, per operation (cri_dockerd_docker_operation_duration_seconds)."""
    return histogram_ops(metrics_url, "cri_dockerd_docker_operation_duration_seconds", "operation")


def ops_delta(before, after):
    out = {}
    for op, a in after.items():
        if not isinstance(a, dict):
            continue
        b = before.get(op, {}) if isinstance(before.get(op), dict) else {}
        n = a.get("count", 0) - b.get("count", 0)
        if n > 0:
            out[op] = {"calls": int(n), "mean_s": round((a.get("sum", 0) - b.get("sum", 0)) / n, 4)}
    return out


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


# What a batch's CPU went to, machine-wide, by process name (each daemon's reaped children, such
# as a shim's runc, count as the parent's). Kept apart: the CRI runtime by its PID.
CPU_GROUPS = (("dockerd", "dockerd"), ("containerd-shim", "shims"), ("containerd", "containerd"),
              ("runc", "runc"), ("kubelet", "kubelet"), ("kube-apiserver", "kube-apiserver"),
              ("etcd", "etcd"), ("python3", "this harness"))


def cpu_ticks():
    """(pid, start time) -> (process name, its and its reaped children's CPU ticks)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()
        out[(int(d), rest[19])] = (comm, sum(int(v) for v in rest[11:15]))
    return out


def busy_ticks():
    """The machine's (busy, all) CPU ticks since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def cpu_window(before, after, cri_pid):
    """CPU seconds per group between two cpu_ticks() and busy_ticks() snapshots."""
    (ticks0, busy0), (ticks1, busy1) = before, after
    hz = os.sysconf("SC_CLK_TCK")
    groups = {}
    for key, (comm, t) in ticks1.items():
        if key[0] == cri_pid:
            name = "cri"
        else:
            name = next((g for prefix, g in CPU_GROUPS if comm.startswith(prefix)), "other")
        groups[name] = groups.get(name, 0) + t - ticks0.get(key, (comm, 0))[1]
    out = {k: round(v / hz, 2) for k, v in groups.items()}
    out["all"] = round((busy1[0] - busy0[0]) / hz, 2)
    out["busy_share"] = round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3)
    return out


def sandboxes_left(crictl):
    """Ready sandboxes; stopped ones wait for the kubelet's garbage collection (a minute)."""
    out = subprocess.run(crictl + ["pods", "--state", "ready", "-q"], capture_output=True, text=True, timeout=60).stdout
    return len(out.split())


def batch(api, n, image, node, metrics_url, crictl, timeout, cri_metrics=None, cri_pid=None):
    name = "d%d-%d" % (n, int(time.time()))
    watcher = Watcher(api, name)
    watcher.start()
    if not watcher.ready.wait(30):
        raise SystemExit("density: the watch did not start")
    ops_before = kubelet_runtime_ops(metrics_url)
    docker_before = docker_ops(cri_metrics)
    posted = {}
    cpu_before = (cpu_ticks(), busy_ticks())

    def post(i):
        pod_name = "%s-%03d" % (name, i)
        t = time.monotonic()
        api.request("POST", api.pods_path(), pod(pod_name, name, image, node)).read()
        posted[pod_name] = t

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(post, range(n)))
    deadline = start + timeout
    while watcher.count() < n and time.monotonic() < deadline:
        time.sleep(0.1)
    cpu = cpu_window(cpu_before, (cpu_ticks(), busy_ticks()), cri_pid)
    wall = (max(watcher.running.values()) - start) if watcher.running else None
    latencies = [watcher.running[p] - t for p, t in posted.items() if p in watcher.running]
    result = {
        "pods": n, "running": len(latencies), "wall_s": wall and round(wall, 2),
        "p50_s": latencies and round(percentile(latencies, 50), 2),
        "p99_s": latencies and round(percentile(latencies, 99), 2),
        "max_s": latencies and round(max(latencies), 2),
        "kubelet_runtime_ops": ops_delta(ops_before, kubelet_runtime_ops(metrics_url)),
        "cpu_s": cpu,
    }
    if cri_metrics:
        result["docker_ops"] = ops_delta(docker_before, docker_ops(cri_metrics))
    return name, result


def delete(api, name, crictl, timeout):
    t = time.monotonic()
    api.request("DELETE", api.pods_path() + "?labelSelector=density%3D" + name).read()
    deadline = t + timeout
    while time.monotonic() < deadline:
        left = json.load(api.request("GET", api.pods_path() + "?labelSelector=density%3D" + name))["items"]
        if not left and sandboxes_left(crictl) == 0:
            return round(time.monotonic() - t, 2)
        time.sleep(0.5)
    return None


def cri_floor(crictl, n, image, workdir, parallel, cri_pid=None):
    """n pods started straight through the CRI, parallel at a time (crictl run: RunPodSandbox,
    CreateContainer, StartContainer); the wall seconds until the last one started. The kubelet
    must not run: it would remove pods it does not know."""
    def run(i):
        logs = os.path.join(workdir, "floor-logs-%03d" % i)
        os.makedirs(logs, exist_ok=True)  # as the kubelet does before a pod's containers
        pod_cfg = os.path.join(workdir, "floor-pod-%03d.json" % i)
        ctr_cfg = os.path.join(workdir, "floor-ctr-%03d.json" % i)
        with open(pod_cfg, "w") as f:
            json.dump({"metadata": {"name": "floor-%03d" % i, "namespace": "floor", "uid": "floor-%03d" % i},
                       "log_directory": logs, "linux": {}}, f)
        with open(ctr_cfg, "w") as f:
            json.dump({"metadata": {"name": "c"}, "image": {"image": image},
                       "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                       "log_path": "c.log", "linux": {}}, f)
        r = subprocess.run(crictl + ["run", "--no-pull", ctr_cfg, pod_cfg], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit("density: crictl run: " + r.stderr.strip())

    cpu_before = (cpu_ticks(), busy_ticks())
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(run, range(n)))
    wall = time.monotonic() - start
    cpu = cpu_window(cpu_before, (cpu_ticks(), busy_ticks()), cri_pid)
    subprocess.run(crictl + ["rmp", "-fa"], capture_output=True, timeout=600)
    return {"pods": n, "parallel": parallel, "wall_s": round(wall, 2), "cpu_s": cpu}


def print_report(outdir):
    """The table of a density-bench.sh run: OUTDIR/{ours,upstream}/density*.json."""
    def load(who, name):
        try:
            with open(os.path.join(outdir, who, name)) as f:
                return json.load(f)
        except OSError:
            return None
    runs = {w: (load(w, "density.json"), load(w, "density-floor.json")) for w in ("ours", "upstream")}
    rows = []

    def row(label, a, b, unit="s"):
        ratio = "%.2f" % (a / b) if a is not None and b else "-"
        fmt = lambda v: "-" if v is None else ("%g %s" % (v, unit))
        rows.append("| %s | %s | %s | %s |" % (label, fmt(a), fmt(b), ratio))

    (od, of), (ud, uf) = runs["ours"], runs["upstream"]
    if of and uf:
        row("%d pods straight through the CRI (16 at a time), wall" % of["pods"], of["wall_s"], uf["wall_s"])
    for ob, ub in zip((od or {}).get("batches", []), (ud or {}).get("batches", [])):
        n = ob["pods"]
        row("%d pods at once through the kubelet: p50" % n, ob["p50_s"], ub["p50_s"])
        row("%d pods: p99" % n, ob["p99_s"], ub["p99_s"])
        row("%d pods: wall (first POST to last Running)" % n, ob["wall_s"], ub["wall_s"])
    if od and ud and "idle" in od and "idle" in ud:
        for k in ("dockerd", "containerd", "cri"):
            row("%.0f s idle with %d pods: %s CPU" % (od["idle"]["seconds"], od["idle"]["pods"], k),
                od["idle"]["cpu_ms"].get(k), ud["idle"]["cpu_ms"].get(k), "ms")
    print("| | ours | upstream | ours/upstream |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    if od and of:
        last = od["batches"][-1]
        if last["pods"] == of["pods"] and last["wall_s"]:
            print("\nours: the %d-pod batch through the kubelet took %.2fx the CRI floor's wall time" % (last["pods"], last["wall_s"] / of["wall_s"]))
    # Where the kubelet's time went: its CRI calls in the largest batch, mean seconds each.
    if od and ud and od["batches"] and ud["batches"]:
        oo, uo = od["batches"][-1]["kubelet_runtime_ops"], ud["batches"][-1]["kubelet_runtime_ops"]
        print("\nkubelet_runtime_operations in the %d-pod batch (calls, mean s): ours | upstream" % od["batches"][-1]["pods"])
        for op in sorted(set(oo) | set(uo), key=lambda o: -(oo.get(o, {}).get("calls", 0))):
            a, b = oo.get(op, {}), uo.get(op, {})
            print("  %-28s %5s %8s | %5s %8s" % (op, a.get("calls", "-"), a.get("mean_s", "-"), b.get("calls", "-"), b.get("mean_s", "-")))
    # Where the CPU went while the floor and the largest batch started: are they bound by the
    # CPU, and by whose share of it?
    windows = []
    if of and uf and "cpu_s" in of and "cpu_s" in uf:
        windows.append(("the %d pods straight through the CRI" % of["pods"], of["cpu_s"], uf["cpu_s"]))
    if od and ud and od["batches"] and ud["batches"] and "cpu_s" in od["batches"][-1] and "cpu_s" in ud["batches"][-1]:
        windows.append(("the %d-pod batch (first POST to last Running)" % od["batches"][-1]["pods"], od["batches"][-1]["cpu_s"], ud["batches"][-1]["cpu_s"]))
    for what, oc, uc in windows:
        print("\nCPU seconds in %s, machine-wide by process: ours | upstream" % what)
        print("  %-28s %7s | %7s" % ("share of all CPUs busy", oc["busy_share"], uc["busy_share"]))
        for k in sorted((set(oc) | set(uc)) - {"busy_share"}, key=lambda k: -oc.get(k, 0)):
            print("  %-28s %7s | %7s" % (k, oc.get(k, "-"), uc.get(k, "-")))
    # Ours only (upstream has no such metric): the Docker calls behind those CRI calls.
    if od and od["batches"] and od["batches"][-1].get("docker_ops"):
        last = od["batches"][-1]
        print("\nours: Docker calls in the %d-pod batch (calls, mean s, per pod)" % last["pods"])
        for op, v in sorted(last["docker_ops"].items(), key=lambda kv: -kv[1]["calls"]):
            print("  %-34s %5d %8s %6.2f" % (op, v["calls"], v["mean_s"], v["calls"] / last["pods"]))


def cri_pid(args):
    """The CRI runtime's PID of --pid cri=PID, or None."""
    return int(dict(kv.split("=", 1) for kv in args.pid).get("cri", 0)) or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server")
    ap.add_argument("--token")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--image")
    ap.add_argument("--node", help="the kubelet's node name")
    ap.add_argument("--counts", default="10,100")
    ap.add_argument("--kubelet-metrics", help="the kubelet's /metrics URL")
    ap.add_argument("--crictl", help="crictl command line, space separated")
    ap.add_argument("--pid", action="append", default=[], help="NAME=PID whose idle CPU to sample")
    ap.add_argument("--idle", type=float, default=30)
    ap.add_argument("--cri-pprof", help="the CRI runtime's /debug/pprof/profile URL, to profile the idle window")
    ap.add_argument("--cri-metrics", help="ours' /metrics URL, to count the Docker calls of each batch")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out")
    ap.add_argument("--cri-floor", type=int, default=0,
                    help="start this many pods straight through the CRI first, and exit (no kubelet)")
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--report", metavar="OUTDIR", help="print the table of a density-bench.sh run, and exit")
    args = ap.parse_args()
    if args.report:
        print_report(args.report)
        return
    if args.cri_floor:
        floor = cri_floor(args.crictl.split(), args.cri_floor, args.image, args.workdir, 16, cri_pid(args))
        print("density: %d pods straight through the CRI, 16 at a time: wall %s s" % (floor["pods"], floor["wall_s"]), flush=True)
        with open(args.out, "w") as f:
            json.dump(floor, f, indent=1)
        return
    api = API(args.server, args.token, args.namespace)
    crictl = args.crictl.split()
    report = {"batches": []}
    counts = [int(c) for c in args.counts.split(",") if c]
    for i, n in enumerate(counts):
        name, result = batch(api, n, args.image, args.node, args.kubelet_metrics, crictl, args.timeout, args.cri_metrics, cri_pid(args))
        print("density: %d pods: %d Running, p50 %s s, p99 %s s, wall %s s" % (n, result["running"], result["p50_s"], result["p99_s"], result["wall_s"]), flush=True)
        if i == len(counts) - 1 and result["running"] == n:
            time.sleep(5)  # let the last starts' follow-up work (status, PLEG) settle
            pids = dict(kv.split("=", 1) for kv in args.pid)
            before = {k: cpu_ms(int(p)) for k, p in pids.items()}
            if args.cri_pprof:
                # A CPU profile of the CRI runtime over the idle window (go tool pprof reads it).
                url = "%s?seconds=%d" % (args.cri_pprof, int(args.idle))
                with urllib.request.urlopen(url, timeout=args.idle + 60) as resp, open(args.out + ".idle-cpu.pprof", "wb") as f:
                    f.write(resp.read())
            else:
                time.sleep(args.idle)
            report["idle"] = {"seconds": args.idle, "pods": n,
                              "cpu_ms": {k: round(cpu_ms(int(p)) - before[k]) for k, p in pids.items()}}
            print("density: idle %.0f s with %d pods, CPU ms: %s" % (args.idle, n, report["idle"]["cpu_ms"]), flush=True)
        result["delete_s"] = delete(api, name, crictl, args.timeout)
        report["batches"].append(result)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    if any(b["running"] != b["pods"] or b["delete_s"] is None for b in report["batches"]):
        raise SystemExit("density: not every pod reached Running, or a batch was not deleted in time")


if __name__ == "__main__":
    main()
