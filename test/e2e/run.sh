#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# End to end with a real kubelet (Kubernetes v1.37.2) against a cri-dockerd binary.
#
# Usage: run.sh BINARY
# Env:   E2E_OUT  where the logs go (default: a new /tmp/cri-dockerd-e2e.XXXXXX, kept)
#
# It runs on a private dockerd (own data root, exec root, containerd namespace and bridge, no
# iptables), because a kubelet kills every pod its runtime lists that it does not know: on the
# shared dockerd it would kill the pods of other tests. The private dockerd gets the runtimes of
# /etc/docker/daemon.json (hack/docker.sh: `wrapped` logs each runc call) and the
# two local images (busybox, pause); nothing is pulled.
#
#  1. standalone kubelet (no API server): a static busybox pod reaches Running through our socket
#     (checked with crictl), then goes away when its manifest is removed.
#  2. etcd + kube-apiserver + kubelet: a RuntimeClass with handler `wrapped`; its pod reaches
#     Running with the sandbox and the container on that runtime (docker inspect and the wrapper's
#     log), `kubectl logs` and `kubectl exec` work on it; a RuntimeClass `gvisor` pod is Running
#     on gVisor (kubectl exec shows gVisor's kernel and dmesg) with its logs; a RuntimeClass
#     with an unknown handler gives a FailedCreatePodSandBox event with our message; two NRI
#     plugins (test/nri-plugins) put a device and a ulimit into a pod through its annotations.
#  3. the same kubelet again with the EventedPLEG, PodAndContainerStatsFromCRI and
#     ContainerStopSignals gates: a pod starts, a crashing container restarts through our events,
#     /metrics/cadvisor and the summary show the pod's cpu and memory, stopSignal and user reach
#     the pod's status, and the pod is deleted with nothing left.
# E2E_DENSITY=COUNTS replaces 1 and the checks of 2 with the density run of density.py (make
# bench-density). Prints the time to Running of each pod. Exits non-zero on any failed check. Everything it
# starts (processes, pods, bridge, cgroups, temp dirs, kernel tunables the kubelet sets) is
# cleaned up on exit, pass or fail.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=e2e

[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 BINARY" >&2; exit 2; }
BINARY=$1
[[ -x $BINARY ]] || { echo "run.sh: $BINARY is not an executable" >&2; exit 2; }
BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")
# E2E_DENSITY=COUNTS (e.g. 10,100): instead of the checks, the density run of density.py (make
# bench): the CRI floor, then each batch through the kubelet; figures in $OUT/density*.json.
DENSITY=${E2E_DENSITY:-}

DOCKER_CLI=/usr/bin/docker # Debian's client, matching the 20.10 daemon
BUSYBOX_IMAGE=cri-dockerd-test/busybox:latest
PAUSE_IMAGE=registry.k8s.io/pause:3.10
WRAPPER_LOG=/var/log/cri-dockerd-test/runtime-wrapped.log
NODE=crid-e2e
BRIDGE=crid-e2e0
NS=default

failures=0
pass() { echo "  PASS  $*"; }
fail() { echo "  FAIL  $*"; failures=$((failures + 1)); }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# free_port: a port nothing listens on, never handed out twice in a run. It is taken below the
# kernel's ephemeral range: a port from bind(0) can come back as the source port of an outgoing
# connection (the apiserver's to etcd) before its own server listens on it, and that server then
# fails with "address already in use".
free_port() {
  local lo p _
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
  ((lo > 11000)) || lo=32768
  for _ in {1..200}; do
    p=$((10000 + RANDOM % (lo - 10000)))
    grep -qx "$p" "$RUN/ports" 2>/dev/null && continue
    python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$p" 2>/dev/null || continue
    echo "$p" >>"$RUN/ports"
    echo "$p"
    return
  done
  die "no free port below $lo"
}

# One run at a time on a machine: the kubelet's cgroups (/kubepods) and kernel tunables are global.
mkdir -p /var/cache/cri-dockerd-ci
exec 9>/var/cache/cri-dockerd-ci/e2e.lock
flock -w 1800 9 || die "another e2e run holds /var/cache/cri-dockerd-ci/e2e.lock"

# --- setup ------------------------------------------------------------------------------------
"$ROOT/hack/docker.sh" >/dev/null
"$ROOT/hack/images.sh" >/dev/null
K8S=$("$HERE/build-k8s.sh" --gate | tail -n 1)
CRICTL=$("$ROOT/test/critest/build-tools.sh" | tail -n 1)/crictl
KUBELET=$K8S/kubelet APISERVER=$K8S/kube-apiserver KUBECTL=$K8S/kubectl ETCD=$K8S/etcd

OUT=${E2E_OUT:-$(mktemp -d /tmp/cri-dockerd-e2e.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUN=$(mktemp -d /tmp/crid-e2e.XXXXXX) # short: unix socket paths are limited
# The host node the NRI device injector passes through (2n); removed with the run.
NRI_DEVICE=/dev/crid-e2e-nri.${RUN##*.}
log "logs in $OUT"

# --- cleanup (registered before anything starts) ------------------------------------------------
declare -A pids=()
stop_proc() { # NAME [SECONDS]
  stop_pid "${pids[$1]:-}" "$1" "${2:-15}"
  unset "pids[$1]"
}
# The kubelet sets these (protectKernelDefaults: false); give them back their values.
TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A tunables=()
for t in "${TUNABLES[@]}"; do [[ -r /proc/sys/$t ]] && tunables[$t]=$(cat "/proc/sys/$t"); done
# Cgroups the kubelet creates; removed on exit only if they did not exist before.
kubepods_existed=()
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [[ -d $d ]] && kubepods_existed+=("$d"); done
# The kubelet's device plugin socket lives in /var/lib/kubelet whatever its --root-dir.
kubelet_dir=
if [[ ! -e /var/lib/kubelet ]]; then
  kubelet_dir=/var/lib/kubelet
elif [[ ! -e /var/lib/kubelet/device-plugins ]]; then
  kubelet_dir=/var/lib/kubelet/device-plugins
fi

remove_all_pods() { # every pod on the private dockerd is ours
  if [[ -S $RUN/cri.sock ]]; then
    # A RunPodSandbox cancelled by the kubelet's exit may still be rolling back: retry until
    # the removal succeeds.
    wait_for 60 "crictl rmp -fa to remove every pod" quiet timeout 60 "$CRICTL" --config "$RUN/crictl.yaml" rmp -fa ||
      log "crictl rmp -fa failed: $(timeout 60 "$CRICTL" --config "$RUN/crictl.yaml" rmp -fa 2>&1)"
  fi
  if [[ -S $RUN/docker.sock ]]; then
    local left
    left=$(dockerp ps -aq 2>/dev/null || true)
    # shellcheck disable=SC2086
    [[ -z $left ]] || dockerp rm -f $left >/dev/null 2>&1 || true
  fi
}
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  stop_proc kubelet 20
  [[ -n ${pids[crid]:-} ]] && remove_all_pods
  stop_proc crid
  stop_proc apiserver
  stop_proc etcd
  stop_proc dockerd 30
  # Mounts left under the run dir (dockerd's overlays, kubelet volumes), deepest first.
  findmnt -rn -o TARGET | grep "^$RUN/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  rm -rf "$RUN"
  rm -f "$NRI_DEVICE"
  [[ -n $kubelet_dir ]] && rm -rf "$kubelet_dir"
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $d ]] || continue
    [[ " ${kubepods_existed[*]-} " == *" $d "* ]] && continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d $d ]] && log "could not remove cgroup $d"
  done
  for t in "${!tunables[@]}"; do
    [[ $(cat "/proc/sys/$t") == "${tunables[$t]}" ]] || echo "${tunables[$t]}" >"/proc/sys/$t" 2>/dev/null
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- a private dockerd ----------------------------------------------------------------------------
dockerp() { "$DOCKER_CLI" -H "unix://$RUN/docker.sock" "$@"; }
# (One run at a time holds the lock: a bridge of that name is a killed run's.)
NODE_IP=$(make_bridge "$BRIDGE" 10.213.7 10.214.7 10.215.7 172.31.213) || die "cannot make the private bridge $BRIDGE"
jq '{runtimes: (.runtimes // {})}' /etc/docker/daemon.json >"$RUN/daemon.json"
jq -e '.runtimes.wrapped and .runtimes.gvisor' "$RUN/daemon.json" >/dev/null || die "no runtime 'wrapped' or 'gvisor' in /etc/docker/daemon.json"
if [[ -n $DENSITY ]]; then
  # Upstream's sandboxes ask for oom_score_adj -998, which this VM (no CAP_SYS_RESOURCE) refuses
  # ("can't get final child's PID from pipe"); ours clamps it itself. For both binaries alike,
  # the default runtime is a runc that sets a negative oomScoreAdj to 0 (as the Go benchmarks'
  # ClampOOMScoreAdj does).
  # shellcheck disable=SC2016 # the wrapper's own "$@" and $a, expanded when it runs
  printf '#!/bin/sh
prev=
for a in "$@"; do
  [ "$prev" = --bundle ] && sed -i '"'"'s/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/'"'"' "$a/config.json"
  prev=$a
done
exec %s "$@"
' \
    "$(command -v runc)" >"$RUN/oom-clamp-runc"
  chmod +x "$RUN/oom-clamp-runc"
  jq --arg p "$RUN/oom-clamp-runc" '.runtimes["oom-clamp"] = {path: $p} | .["default-runtime"] = "oom-clamp"' \
    "$RUN/daemon.json" >"$RUN/daemon.json.tmp" && mv "$RUN/daemon.json.tmp" "$RUN/daemon.json"
fi
log "starting a private dockerd on unix://$RUN/docker.sock (bridge $BRIDGE, $NODE_IP/24)"
dockerd --config-file "$RUN/daemon.json" --host "unix://$RUN/docker.sock" --data-root "$RUN/docker" \
  --exec-root "$RUN/dx" --pidfile "$RUN/docker.pid" --bridge "$BRIDGE" --iptables=false --ip-masq=false \
  --containerd-namespace crid-e2e --containerd-plugins-namespace crid-e2e-plugins \
  >"$OUT/dockerd.log" 2>&1 &
pids[dockerd]=$!
wait_for 60 "the private dockerd" quiet dockerp version || { tail -20 "$OUT/dockerd.log" >&2; die "private dockerd did not answer within 60 s"; }
t0=$(now)
"$DOCKER_CLI" save "$BUSYBOX_IMAGE" "$PAUSE_IMAGE" | dockerp load >/dev/null
log "loaded $BUSYBOX_IMAGE and $PAUSE_IMAGE in $(since "$t0") s"

# --- cri-dockerd -----------------------------------------------------------------------------------
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$RUN/cri.sock" "$RUN/cri.sock" >"$RUN/crictl.yaml"
crictl() { "$CRICTL" --config "$RUN/crictl.yaml" "$@"; }
log "starting $BINARY on unix://$RUN/cri.sock (log: $OUT/cri-dockerd.log)"
# The density run profiles the idle CPU of a binary that serves pprof and metrics (ours;
# upstream has none), and counts its Docker calls. Ours serves pprof only with --enable-pprof,
# which binaries older than the flag do not know (they serve pprof with the metrics).
CRI_PPROF=()
if [[ -n $DENSITY ]] && "$BINARY" --help 2>&1 | grep -q -- --metrics-bind-addr; then
  CRI_PPROF=(--metrics-bind-addr "127.0.0.1:$(free_port)")
  if "$BINARY" --help 2>&1 | grep -q -- --enable-pprof; then
    CRI_PPROF+=(--enable-pprof)
  fi
fi
# NRI: two plugins started from --nri-plugin-path (test/nri-plugins: containerd/nri's samples
# device-injector and ulimit-adjuster, as annotations drive them), on a socket of this run's.
CRI_NRI=()
if "$BINARY" --help 2>&1 | grep -q -- --nri-socket; then
  mkdir -p "$RUN/nri-plugins"
  (cd "$ROOT" && go build -o "$RUN/nri-plugins/10-device-injector" ./test/nri-plugins)
  cp "$RUN/nri-plugins/10-device-injector" "$RUN/nri-plugins/20-ulimit-adjuster"
  CRI_NRI=(--nri-socket "$RUN/nri.sock" --nri-plugin-path "$RUN/nri-plugins" --nri-plugin-config-path "$RUN/nri-conf")
fi
"$BINARY" --container-runtime-endpoint "unix://$RUN/cri.sock" --docker-endpoint "unix://$RUN/docker.sock" \
  --cri-dockerd-root-directory "$RUN/crid" --network-plugin= --pod-infra-container-image "$PAUSE_IMAGE" \
  --log-level info "${CRI_PPROF[@]}" "${CRI_NRI[@]}" >"$OUT/cri-dockerd.log" 2>&1 &
pids[crid]=$!
wait_for 30 "cri-dockerd to serve" quiet crictl version || { tail -20 "$OUT/cri-dockerd.log" >&2; die "cri-dockerd did not serve within 30 s"; }

# kubelet_config DIR: a kubelet config for a node in DIR; prints the healthz port.
kubelet_config() {
  local dir=$1 port hz
  port=$(free_port) hz=$(free_port)
  mkdir -p "$dir/root" "$dir/manifests" "$dir/pod-logs"
  echo "$port" >"$dir/port"
  cat >"$dir/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$RUN/cri.sock
staticPodPath: $dir/manifests
fileCheckFrequency: 1s
podLogsDir: $dir/pod-logs
address: $NODE_IP
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hz
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
# No KUBE-FIREWALL / canary chains in this machine's iptables.
makeIPTablesUtilChains: false
# Never collect images or evict pods of this machine.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
syncFrequency: 10s
EOF
  echo "$hz"
}
start_kubelet() { # DIR HEALTHZ_PORT [ARGS...]
  local dir=$1 hz=$2
  shift 2
  "$KUBELET" --config "$dir/config.yaml" --root-dir "$dir/root" --hostname-override "$NODE" \
    --node-ip "$NODE_IP" --cert-dir "$dir/pki" --v=2 "$@" >"$OUT/$(basename "$dir").log" 2>&1 &
  pids[kubelet]=$!
  wait_for 60 "the kubelet's /healthz" quiet curl -sf "http://127.0.0.1:$hz/healthz" ||
    { tail -20 "$OUT/$(basename "$dir").log" >&2; die "kubelet did not become healthy within 60 s"; }
}

# --- 1. standalone kubelet with a static pod --------------------------------------------------------
if [[ -n $DENSITY ]]; then
  # The density run's floor instead: the largest batch straight through the CRI, no kubelet.
  echo "== 1. density: the CRI floor"
  python3 "$HERE/density.py" --cri-floor "$(tr ',' '\n' <<<"$DENSITY" | sort -n | tail -1)" \
    --image "$BUSYBOX_IMAGE" --crictl "$CRICTL --config $RUN/crictl.yaml" --workdir "$RUN" \
    --pid "cri=${pids[crid]}" --out "$OUT/density-floor.json" || die "the CRI floor failed"
  remove_all_pods
else
echo "== 1. standalone kubelet, static pod"
K1=$RUN/kubelet-standalone
hz=$(kubelet_config "$K1")
t0=$(now)
start_kubelet "$K1" "$hz"
log "kubelet healthy after $(since "$t0") s (log: $OUT/kubelet-standalone.log)"
cat >"$RUN/static.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: e2e-static, namespace: $NS}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleeper
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo static pod up; trap "exit 0" TERM; while true; do sleep 1; done']
EOF
t0=$(now)
mv "$RUN/static.yaml" "$K1/manifests/e2e-static.yaml"
static_running() { [[ -n $(crictl ps --name '^sleeper$' --state running -q) ]]; }
if wait_for 90 "the static pod to run" quiet static_running; then
  echo "  static pod e2e-static: Running after $(since "$t0") s"
  pass "static pod Running through our socket"
  sid=$(crictl pods --name "e2e-static-$NODE" --state ready -q)
  cid=$(crictl ps --name '^sleeper$' --state running -q)
  if [[ -n $sid ]]; then
    pass "sandbox ${sid:0:13} Ready (crictl pods)"
  else
    fail "no Ready sandbox for e2e-static"
  fi
  if crictl logs "$cid" 2>&1 | grep -q 'static pod up'; then
    pass "crictl logs shows the output"
  else
    fail "crictl logs $cid lacks 'static pod up'"
  fi
else
  fail "static pod did not reach Running within 90 s"
  crictl pods >&2 || true
  crictl ps -a >&2 || true
  grep -E '^E' "$OUT/kubelet-standalone.log" | tail -10 >&2 || true
fi
t0=$(now)
rm -f "$K1/manifests/e2e-static.yaml"
if wait_for 60 "the static pod's sandbox to stop" quiet bash -c "[[ -z \$('$CRICTL' --config '$RUN/crictl.yaml' pods --state ready -q) ]]"; then
  pass "static pod stopped $(since "$t0") s after its manifest was removed"
else
  fail "static pod still Ready 60 s after its manifest was removed"
fi
stop_proc kubelet 20
remove_all_pods
fi

# --- 2. etcd + kube-apiserver + kubelet -----------------------------------------------------------------
echo "== 2. etcd + kube-apiserver + kubelet, RuntimeClass"
t0=$(now)
ep=$(free_port) pp=$(free_port) ap=$(free_port)
"$ETCD" --name e2e --data-dir "$RUN/etcd" --listen-client-urls "http://127.0.0.1:$ep" \
  --advertise-client-urls "http://127.0.0.1:$ep" --listen-peer-urls "http://127.0.0.1:$pp" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pp" --initial-cluster "e2e=http://127.0.0.1:$pp" \
  --log-level warn >"$OUT/etcd.log" 2>&1 &
pids[etcd]=$!
wait_for 30 "etcd's /health" quiet curl -sf "http://127.0.0.1:$ep/health" || { tail -20 "$OUT/etcd.log" >&2; die "etcd not healthy within 30 s"; }

mkdir -p "$RUN/apiserver"
openssl genrsa -out "$RUN/apiserver/sa.key" 2048 2>/dev/null
openssl rsa -in "$RUN/apiserver/sa.key" -pubout -out "$RUN/apiserver/sa.pub" 2>/dev/null
# kube-apiserver turns anonymous auth off under AlwaysAllow: a static token it is.
TOKEN=$(openssl rand -hex 16)
echo "$TOKEN,e2e-admin,e2e-admin,system:masters" >"$RUN/apiserver/tokens.csv"
"$APISERVER" --etcd-servers "http://127.0.0.1:$ep" --bind-address 127.0.0.1 --secure-port "$ap" \
  --advertise-address "$NODE_IP" --cert-dir "$RUN/apiserver/certs" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$RUN/apiserver/sa.pub" --service-account-signing-key-file "$RUN/apiserver/sa.key" \
  --service-cluster-ip-range 10.96.213.0/24 --authorization-mode AlwaysAllow \
  --token-auth-file "$RUN/apiserver/tokens.csv" --endpoint-reconciler-type none \
  --kubelet-preferred-address-types InternalIP --feature-gates ContainerStopSignals=true \
  --v=1 >"$OUT/kube-apiserver.log" 2>&1 &
pids[apiserver]=$!
cat >"$RUN/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://127.0.0.1:$ap", insecure-skip-tls-verify: true}
users:
- name: e2e
  user: {token: "$TOKEN"}
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e, namespace: $NS}
current-context: e2e
EOF
kubectl() { "$KUBECTL" --kubeconfig "$RUN/kubeconfig" "$@"; }
wait_for 90 "kube-apiserver's /readyz" quiet kubectl get --raw /readyz ||
  { tail -20 "$OUT/kube-apiserver.log" >&2; die "kube-apiserver not ready within 90 s"; }
log "etcd + kube-apiserver ready after $(since "$t0") s"
# No controller manager: make the ServiceAccount the admission plugin wants.
wait_for 30 "namespace $NS" quiet kubectl get namespace "$NS" || die "namespace $NS missing"
kubectl create serviceaccount default -n "$NS" >/dev/null

K2=$RUN/kubelet-apiserver
hz=$(kubelet_config "$K2")
t0=$(now)
start_kubelet "$K2" "$hz" --kubeconfig "$RUN/kubeconfig"
if wait_for 90 "node $NODE to be Ready" quiet kubectl wait --for=condition=Ready "node/$NODE" --timeout=2s; then
  log "node $NODE Ready after $(since "$t0") s (log: $OUT/kubelet-apiserver.log)"
else
  kubectl describe node "$NODE" >&2 || true
  die "node $NODE not Ready within 90 s"
fi

if [[ -n $DENSITY ]]; then
  echo "== 2. density: $DENSITY pods at once through the kubelet"
  dockerd_pid=${pids[dockerd]}
  containerd_pid=$(pgrep -P "$dockerd_pid" -x containerd | head -1)
  python3 "$HERE/density.py" --server "https://127.0.0.1:$ap" --token "$TOKEN" --namespace "$NS" \
    --image "$BUSYBOX_IMAGE" --node "$NODE" --counts "$DENSITY" --kubelet-metrics "https://$NODE_IP:$(cat "$K2/port")/metrics" \
    --crictl "$CRICTL --config $RUN/crictl.yaml" --pid "dockerd=$dockerd_pid" \
    ${containerd_pid:+--pid "containerd=$containerd_pid"} --pid "cri=${pids[crid]}" \
    ${CRI_PPROF[1]:+--cri-pprof "http://${CRI_PPROF[1]}/debug/pprof/profile"} \
    ${CRI_PPROF[1]:+--cri-metrics "http://${CRI_PPROF[1]}/metrics"} \
    --out "$OUT/density.json" || die "the density run failed"
  echo "== e2e density: figures in $OUT/density.json and $OUT/density-floor.json"
  exit 0
fi

kubectl apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: e2e-wrapped}
handler: wrapped
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: e2e-gvisor}
handler: gvisor
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: e2e-nosuch}
handler: nosuch
EOF
pod_yaml() { # NAME RUNTIMECLASS
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  nodeName: $NODE
  runtimeClassName: $2
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo hello from $1 on \$(hostname); trap "exit 0" TERM; while true; do sleep 1; done']
EOF
}

# 2a. the pod on the wrapped runtime
t0=$(now)
pod_yaml e2e-wrapped e2e-wrapped | kubectl create -f - >/dev/null
pod_running() { [[ $(kubectl get pod "$1" -o 'jsonpath={.status.phase}/{.status.containerStatuses[0].ready}') == Running/true ]]; }
if wait_for 90 "pod e2e-wrapped to run" quiet pod_running e2e-wrapped; then
  echo "  pod e2e-wrapped (runtimeClassName e2e-wrapped): Running after $(since "$t0") s"
  pass "pod with RuntimeClass handler 'wrapped' Running"
  cid=$(kubectl get pod e2e-wrapped -o 'jsonpath={.status.containerStatuses[0].containerID}')
  cid=${cid#docker://}
  sid=$(crictl pods --name '^e2e-wrapped$' --namespace "$NS" --state ready -q)
  sid=$(dockerp inspect -f '{{.Id}}' "$sid" 2>/dev/null || true)
  [[ -n $cid && -n $sid ]] || fail "cannot find the sandbox ($sid) or container ($cid) of e2e-wrapped"
  # The kubelet copies ContainerStatus.image_ref into the pod's imageID: upstream's form, here
  # docker://sha256:ID (a locally built image has no repo digest).
  podimg=$(kubectl get pod e2e-wrapped -o 'jsonpath={.status.containerStatuses[0].imageID}')
  imgid=$(dockerp inspect -f '{{.Image}}' "$cid" 2>/dev/null || true)
  if [[ -n $imgid && $podimg == "docker://$imgid" ]]; then
    pass "pod status imageID is upstream's docker://sha256:... form"
  else
    fail "pod status imageID $podimg, want docker://$imgid"
  fi
  for what in sandbox:$sid container:$cid; do
    kind=${what%%:*} id=${what#*:}
    [[ -n $id ]] || continue
    rt=$(dockerp inspect -f '{{.HostConfig.Runtime}}' "$id" 2>&1)
    if [[ $rt == wrapped ]]; then
      pass "$kind ${id:0:12}: HostConfig.Runtime=wrapped"
    else
      fail "$kind ${id:0:12}: HostConfig.Runtime=$rt, want wrapped"
    fi
    if grep -F "$id" "$WRAPPER_LOG" 2>/dev/null | grep -q ' create '; then
      pass "$kind ${id:0:12}: the wrapper runtime logged its create"
    else
      fail "$kind ${id:0:12}: no 'create' line for it in $WRAPPER_LOG"
    fi
  done
  logs_ok() { kubectl logs e2e-wrapped | grep -q 'hello from e2e-wrapped'; }
  if wait_for 15 "kubectl logs of e2e-wrapped" quiet logs_ok; then
    pass "kubectl logs: $(kubectl logs e2e-wrapped | head -1)"
  else
    fail "kubectl logs e2e-wrapped lacks 'hello from e2e-wrapped': $(kubectl logs e2e-wrapped 2>&1 | head -3)"
  fi
  # shellcheck disable=SC2016 # expanded by the container's sh
  execout=$(timeout 60 "$KUBECTL" --kubeconfig "$RUN/kubeconfig" exec e2e-wrapped -- sh -c 'echo exec-ok $((6*7)) $(cat /proc/1/comm)' 2>&1) || true
  if [[ $execout == "exec-ok 42 sh" ]]; then
    pass "kubectl exec: $execout"
    if grep -F "$cid" "$WRAPPER_LOG" | grep -q ' exec '; then
      pass "the exec ran through the wrapper runtime"
    else
      fail "no 'exec' line for ${cid:0:12} in $WRAPPER_LOG"
    fi
  else
    fail "kubectl exec e2e-wrapped: $execout"
  fi
else
  fail "pod e2e-wrapped not Running within 90 s"
  kubectl describe pod e2e-wrapped | tail -20 >&2 || true
fi

# 2b. what the kubelet passes beyond a command: an image volume (ImageVolume is GA in 1.36) and
# the /dev/shm size annotation
t0=$(now)
kubectl create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: e2e-spec
  namespace: $NS
  annotations: {io.cri-dockerd.shm-size: 96Mi}
spec:
  nodeName: $NODE
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    volumeMounts: [{name: img, mountPath: /mnt/img}]
  volumes:
  - name: img
    image: {reference: $BUSYBOX_IMAGE, pullPolicy: Never}
EOF
if wait_for 60 "pod e2e-spec to run" quiet pod_running e2e-spec; then
  echo "  pod e2e-spec: Running after $(since "$t0") s"
  specout=$(timeout 60 "$KUBECTL" --kubeconfig "$RUN/kubeconfig" exec e2e-spec -- sh -c \
    'test -x /mnt/img/bin/sh && echo img-ok; touch /mnt/img/x 2>/dev/null || echo ro-ok; grep " /dev/shm " /proc/mounts' 2>&1) || true
  if [[ $specout == *img-ok* && $specout == *ro-ok* ]]; then
    pass "image volume: the image's files at /mnt/img, read-only"
  else
    fail "image volume in e2e-spec: $specout"
  fi
  if [[ $specout == *size=98304k* ]]; then
    pass "/dev/shm sized 96Mi by the pod annotation"
  else
    fail "/dev/shm of e2e-spec: $specout"
  fi
  # The kubelet's summary API takes container stats from our ListContainerStats/PodSandboxStats.
  summary_has_stats() {
    kubectl get --raw "/api/v1/nodes/$NODE/proxy/stats/summary" 2>/dev/null | python3 -c '
import json, sys
pods = [p for p in json.load(sys.stdin).get("pods", []) if p["podRef"]["name"] == "e2e-spec"]
c = [c for p in pods for c in p.get("containers", []) if c["name"] == "main"]
sys.exit(0 if c and c[0].get("memory", {}).get("workingSetBytes", 0) > 0 and c[0].get("cpu", {}).get("usageCoreNanoSeconds", 0) > 0 else 1)'
  }
  if wait_for 40 "the summary API's stats of e2e-spec" quiet summary_has_stats; then
    pass "kubelet summary API: cpu and memory of e2e-spec's container"
  else
    fail "kubelet summary API has no cpu/memory for e2e-spec: $(kubectl get --raw "/api/v1/nodes/$NODE/proxy/stats/summary" 2>&1 | head -c 600)"
  fi
else
  fail "pod e2e-spec not Running within 60 s"
  kubectl describe pod e2e-spec | tail -20 >&2 || true
fi

# 2b'. a pod on gVisor (Debian's runsc; hack/docker.sh's runtime "gvisor"): from
# inside, the kernel is gVisor's, not the host's
t0=$(now)
pod_yaml e2e-gvisor e2e-gvisor | kubectl create -f - >/dev/null
if wait_for 90 "pod e2e-gvisor to run" quiet pod_running e2e-gvisor; then
  echo "  pod e2e-gvisor (runtimeClassName e2e-gvisor): Running after $(since "$t0") s"
  pass "pod with RuntimeClass handler 'gvisor' Running"
  gvout=$(timeout 60 "$KUBECTL" --kubeconfig "$RUN/kubeconfig" exec e2e-gvisor -- sh -c 'uname -r; dmesg | head -1' 2>&1) || true
  if [[ $gvout == *"Starting gVisor"* && ${gvout%%$'\n'*} != "$(uname -r)" ]]; then
    pass "kubectl exec on gVisor: kernel ${gvout%%$'\n'*} (host $(uname -r)), dmesg: ${gvout#*$'\n'}"
  else
    fail "kubectl exec e2e-gvisor: $gvout (want gVisor's kernel and dmesg)"
  fi
  gvlogs_ok() { kubectl logs e2e-gvisor | grep -q 'hello from e2e-gvisor'; }
  if wait_for 15 "kubectl logs of e2e-gvisor" quiet gvlogs_ok; then
    pass "kubectl logs on gVisor: $(kubectl logs e2e-gvisor | head -1)"
  else
    fail "kubectl logs e2e-gvisor lacks 'hello from e2e-gvisor': $(kubectl logs e2e-gvisor 2>&1 | head -3)"
  fi
else
  fail "pod e2e-gvisor not Running within 90 s"
  kubectl describe pod e2e-gvisor | tail -20 >&2 || true
fi

# 2c. the pod whose RuntimeClass handler Docker does not know
t0=$(now)
pod_yaml e2e-nosuch e2e-nosuch | kubectl create -f - >/dev/null
sandbox_event() {
  kubectl get events --field-selector involvedObject.name=e2e-nosuch,reason=FailedCreatePodSandBox \
    -o 'jsonpath={.items[0].message}'
}
if wait_for 60 "the FailedCreatePodSandBox event of e2e-nosuch" quiet bash -c "[[ -n \$('$KUBECTL' --kubeconfig '$RUN/kubeconfig' get events --field-selector involvedObject.name=e2e-nosuch,reason=FailedCreatePodSandBox -o name) ]]"; then
  msg=$(sandbox_event)
  echo "  pod e2e-nosuch: FailedCreatePodSandBox after $(since "$t0") s:"
  echo "    $msg"
  if [[ $msg == *"Docker has no runtime"* ]]; then
    pass "the event carries our message"
  else
    fail "the FailedCreatePodSandBox event lacks 'Docker has no runtime'"
  fi
  left=$(dockerp ps -aq --filter label=io.kubernetes.pod.name=e2e-nosuch)
  if [[ -z $left ]]; then
    pass "nothing left behind in Docker for e2e-nosuch"
  else
    fail "containers left behind for e2e-nosuch: $left"
  fi
  phase=$(kubectl get pod e2e-nosuch -o 'jsonpath={.status.phase}')
  if [[ $phase == Pending ]]; then
    pass "pod e2e-nosuch stays Pending"
  else
    fail "pod e2e-nosuch is $phase, want Pending"
  fi
else
  fail "no FailedCreatePodSandBox event for e2e-nosuch within 60 s"
  kubectl describe pod e2e-nosuch | tail -20 >&2 || true
fi

# 2n. NRI plugins change a pod through the kubelet: the device injector adds a device node (Docker
# passes a host node through: one is made on the host for it) and the ulimit adjuster a limit.
nri_pods=()
if ((${#CRI_NRI[@]})); then
  [[ -e $NRI_DEVICE ]] || mknod "$NRI_DEVICE" c 1 3
  kubectl create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: e2e-nri
  namespace: $NS
  annotations:
    devices.nri.io/container.main: '[{"path": "$NRI_DEVICE", "type": "c", "major": 1, "minor": 3}]'
    ulimits.nri.containerd.io/container.main: '[{"type": "RLIMIT_NOFILE", "hard": 4321, "soft": 1234}]'
spec:
  nodeName: $NODE
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
EOF
  nri_pods=(e2e-nri)
  if wait_for 90 "pod e2e-nri to run" quiet pod_running e2e-nri; then
    nriout=$(kubectl exec e2e-nri -- sh -c "stat -c %t:%T $NRI_DEVICE; ulimit -Sn; ulimit -Hn" 2>&1 | tr '\n' ' ')
    if [[ $nriout == "1:3 1234 4321 " ]]; then
      pass "NRI plugins through the kubelet: device $NRI_DEVICE (1:3) and nofile 1234/4321 inside"
    else
      fail "NRI pod e2e-nri: $nriout, want the device 1:3 and nofile 1234/4321"
    fi
  else
    fail "pod e2e-nri not Running within 90 s"
    kubectl describe pod e2e-nri | tail -20 >&2 || true
  fi
fi

# Pods go away through the kubelet, as on a node.
t0=$(now)
if kubectl delete pod e2e-wrapped e2e-spec e2e-gvisor e2e-nosuch "${nri_pods[@]}" --wait --timeout=60s >/dev/null 2>&1; then
  pass "pods deleted through the kubelet in $(since "$t0") s"
else
  fail "pods not deleted within 60 s"
fi
left=$(crictl pods --state ready -q)
if [[ -z $left ]]; then
  pass "no Ready sandbox left in cri-dockerd"
else
  fail "Ready sandboxes left after the delete: $left"
fi

# --- 3. the kubelet's CRI gates ---------------------------------------------------------------------
# EventedPLEG: pod statuses come from our GetContainerEvents and PodSandboxStatus (the generic
# relist then runs every 300 s only, so restarts seen within 60 s were seen through the events).
# PodAndContainerStatsFromCRI: /metrics/cadvisor and the summary API from our CRI stats.
# ContainerStopSignals: lifecycle.stopSignal reaches Docker. And the status's user.
echo "== 3. kubelet with EventedPLEG, PodAndContainerStatsFromCRI and ContainerStopSignals"
stop_proc kubelet 20
K3=$RUN/kubelet-gates
hz=$(kubelet_config "$K3")
echo "featureGates: {EventedPLEG: true, PodAndContainerStatsFromCRI: true, ContainerStopSignals: true}" >>"$K3/config.yaml"
t0=$(now)
start_kubelet "$K3" "$hz" --kubeconfig "$RUN/kubeconfig"
wait_for 90 "node $NODE to be Ready under the gates" quiet kubectl wait --for=condition=Ready "node/$NODE" --timeout=2s || die "node $NODE not Ready within 90 s under the gates"
log "kubelet with the gates: node Ready after $(since "$t0") s (log: $OUT/kubelet-gates.log)"
t0=$(now)
kubectl create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: e2e-gates, namespace: $NS}
spec:
  nodeName: $NODE
  os: {name: linux}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 30
  securityContext: {runAsUser: 1000, runAsGroup: 3000, supplementalGroups: [5000]}
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    # Three seconds of CPU first: CRI metrics count whole seconds.
    command: [sh, -c, 'trap "echo got-usr1; exit 0" USR1; end=\$((\$(date +%s) + 3)); while [ \$(date +%s) -lt \$end ]; do :; done; while true; do sleep 0.2; done']
    lifecycle: {stopSignal: SIGUSR1}
  - name: crasher
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'sleep 2; exit 3']
EOF
cs() { kubectl get pod e2e-gates -o "jsonpath={.status.containerStatuses[?(@.name==\"$1\")]$2}" 2>/dev/null; }
main_running() { [[ -n $(cs main .state.running.startedAt) ]]; }
if wait_for 90 "e2e-gates/main to run" quiet main_running; then
  pass "pod e2e-gates Running after $(since "$t0") s under EventedPLEG"
else
  fail "pod e2e-gates not Running within 90 s under EventedPLEG"
  kubectl describe pod e2e-gates | tail -20 >&2 || true
fi
restarted() { (($(cs crasher .restartCount || echo 0) >= 2)); }
if wait_for 60 "e2e-gates/crasher's second restart" quiet restarted; then
  pass "crasher restarted twice $(since "$t0") s after the pod's creation (last exit code $(cs crasher .lastState.terminated.exitCode))"
else
  fail "crasher not restarted twice within 60 s: $(cs crasher)"
fi
sig=$(cs main .stopSignal)
mainid=$(cs main .containerID)
mainid=${mainid#docker://}
dsig=$(dockerp inspect -f '{{.Config.StopSignal}}' "$mainid" 2>&1)
if [[ $sig == SIGUSR1 && $dsig == SIGUSR1 ]]; then
  pass "stopSignal SIGUSR1 in the pod status and in Docker's StopSignal"
else
  fail "stopSignal: pod status '$sig', Docker '$dsig', want SIGUSR1"
fi
user=$(cs main .user.linux)
if python3 -c 'import json,sys; u=json.loads(sys.argv[1]); sys.exit(0 if u["uid"]==1000 and u["gid"]==3000 and 5000 in u.get("supplementalGroups",[]) else 1)' "$user" 2>/dev/null; then
  pass "status user: $user"
else
  fail "status user '$user', want uid 1000, gid 3000, group 5000"
fi
# Prometheus text: NAME{LABELS} VALUE [TIMESTAMP]
cadvisor_has() {
  kubectl get --raw "/api/v1/nodes/$NODE/proxy/metrics/cadvisor" 2>/dev/null | python3 -c '
import re, sys
want = {"container_cpu_usage_seconds_total": 0.0, "container_memory_working_set_bytes": 0.0}
for line in sys.stdin:
    m = re.match(r"(\w+)\{(.*)\} (\S+)", line)
    if m and m.group(1) in want and "pod=\"e2e-gates\"" in m.group(2) and "container=\"main\"" in m.group(2):
        want[m.group(1)] = max(want[m.group(1)], float(m.group(3)))
sys.exit(0 if all(v > 0 for v in want.values()) else 1)'
}
if wait_for 60 "/metrics/cadvisor of e2e-gates/main" quiet cadvisor_has; then
  pass "/metrics/cadvisor (from our ListPodSandboxMetrics): cpu and working set of e2e-gates/main"
else
  fail "/metrics/cadvisor lacks non-zero cpu/memory for e2e-gates/main: $(kubectl get --raw "/api/v1/nodes/$NODE/proxy/metrics/cadvisor" 2>&1 | tee "$OUT/cadvisor.txt" | grep -c e2e-gates) lines name the pod (all in $OUT/cadvisor.txt)"
fi
summary_gates() {
  kubectl get --raw "/api/v1/nodes/$NODE/proxy/stats/summary" 2>/dev/null | python3 -c '
import json, sys
pods = [p for p in json.load(sys.stdin).get("pods", []) if p["podRef"]["name"] == "e2e-gates"]
c = [c for p in pods for c in p.get("containers", []) if c["name"] == "main"]
sys.exit(0 if c and c[0].get("memory", {}).get("workingSetBytes", 0) > 0 and c[0].get("cpu", {}).get("usageCoreNanoSeconds", 0) > 0 else 1)'
}
if wait_for 40 "the summary API's stats of e2e-gates/main" quiet summary_gates; then
  pass "summary API under PodAndContainerStatsFromCRI: cpu and memory of e2e-gates/main"
else
  fail "summary API has no cpu/memory for e2e-gates/main under PodAndContainerStatsFromCRI"
fi
t0=$(now)
if kubectl delete pod e2e-gates --wait --timeout=60s >/dev/null 2>&1; then
  pass "pod e2e-gates deleted in $(since "$t0") s"
else
  fail "pod e2e-gates not deleted within 60 s"
fi
# SIGUSR1's trap exits 0; the kill at the end of the 30 s grace would be 137. Read before the
# kubelet's container GC (every minute) removes the container.
code=$(dockerp inspect -f '{{.State.ExitCode}}' "$mainid" 2>&1)
if [[ $code == 0 ]]; then
  pass "main stopped by its SIGUSR1 (exit code 0)"
else
  fail "main's exit code after the delete: $code, want 0 (SIGUSR1's trap)"
fi
gone() { [[ -z $(dockerp ps -aq --filter label=io.kubernetes.pod.name=e2e-gates) ]]; }
if wait_for 150 "e2e-gates' containers to go" quiet gone; then
  pass "nothing left in Docker for e2e-gates $(since "$t0") s after the delete (the kubelet's GC)"
else
  fail "containers left for e2e-gates: $(dockerp ps -a --filter label=io.kubernetes.pod.name=e2e-gates --format '{{.Names}} {{.Status}}')"
fi
# The relist stays quiet: no fallback from the event stream, no event without its pod.
# ("pleg has yet to be successful" is the kubelet's first second, before its first relist.)
noisy=$(grep -cE 'Evented PLEG: (failed|disabling|received ContainerEventResponse with nil)|pleg was last seen active' "$OUT/kubelet-gates.log" || true)
if ((noisy == 0)); then
  pass "kubelet log: no Evented PLEG failure or fallback, PLEG healthy"
else
  fail "kubelet log: $noisy Evented PLEG failure lines: $(grep -E 'Evented PLEG|pleg was last seen' "$OUT/kubelet-gates.log" | head -3)"
fi

echo "== e2e: $failures failed check(s); logs in $OUT"
((failures == 0))
