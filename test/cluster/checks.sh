#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The checks on a cluster run.sh built. Each prints one `check:` line with what it saw, or fails
# the run with what it saw instead.
#
# Usage: checks.sh [--smoke] CONTROL_PLANE WORKER...   (run.sh calls it)
#   --smoke  a pod on the first worker reached from one on the control plane, by pod IP, by a
#            ClusterIP Service's DNS name and by a NodePort on every node; DNS of the API's Service
#   else     also: pod to pod between the workers; the swap of CLUSTER_UPSTREAM_NODE from
#            upstream v0.4.3 to ours (CLUSTER_NODE_DEB) with its pods running; kubectl logs, exec, attach, port-forward and
#            cp to a pod on each worker; a RuntimeClass pod on gVisor; a worker's dockerd
#            restarted with its pods running; drain and uncordon of a worker
# Env: CLUSTER_KUBECTL (kubectl with its kubeconfig), CLUSTER_DOCKER (docker with the nodes'
#      dockerd), CLUSTER_NET (the nodes' /24, the control
#      plane at .10 and the workers at .11 on), CLUSTER_OUT (logs).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=cluster
# log lines carry the time of day.
LOG_STAMP=clock
# UPSTREAM_VERSION: what the swapped worker runs before the swap (the env's, as hack/upstream.sh
# takes it, else the table's).
upstream_env=${UPSTREAM_VERSION:-}
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
UPSTREAM_VERSION=${upstream_env:-$UPSTREAM_VERSION}

smoke=0
[[ ${1:-} == --smoke ]] && { smoke=1; shift; }
cp_node=$1
shift
workers=("$@")
NET=${CLUSTER_NET:?}
OUT=${CLUSTER_OUT:?}
IMAGE=cri-dockerd-cluster/busybox:1
NS=crid-checks

check() { log "check: $*"; }
# CLUSTER_KUBECTL: the kubectl binary and its flags, words without spaces of their own.
read -ra KUBECTL <<<"${CLUSTER_KUBECTL:?}"
kc() { "${KUBECTL[@]}" "$@"; }
kx() { kc -n "$NS" "$@"; }
retry() { # SECONDS CMD...: until CMD succeeds; its output on stdout
  local deadline=$((SECONDS + $1)) out
  shift
  until out=$("$@" 2>&1); do
    ((SECONDS < deadline)) || { echo "$out"; return 1; }
    sleep 1
  done
  echo "$out"
}

# A pod on NODE running busybox's httpd on 8080, serving its own name.
web_pod() { # NAME NODE
  kx apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $1}}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  tolerations: [{operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $IMAGE
    command: [sh, -c, 'mkdir -p /www && echo "$1 on \$(hostname)" >/www/index.html && echo serving && exec httpd -f -v -p 8080 -h /www']
    ports: [{containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
YAML
}
client_pod() { # NAME NODE
  kx apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  tolerations: [{operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  containers:
  - {name: client, image: $IMAGE, command: [sleep, "3600"]}
YAML
}
ready() { kx wait --for=condition=Ready "pod/$1" --timeout=120s >/dev/null || { kx describe pod "$1" >&2; die "pod $1 not Ready within 120 s"; }; }
pod_ip() { kx get pod "$1" -o jsonpath='{.status.podIP}'; }
fetch() { # CLIENT_POD URL: the page, fetched from inside the client pod
  # (busybox 1.35's wget -T crashes; its timeout applet bounds the fetch instead.)
  kx exec "$1" -- timeout 10 wget -q -O - "$2"
}

kc create namespace "$NS" >/dev/null
trap 'kc delete namespace "$NS" --wait=false >/dev/null 2>&1 || true' EXIT

# --- across nodes, Services, DNS --------------------------------------------------------------------
w1=${workers[0]}
web_pod web "$w1"
client_pod client "$cp_node"
ready web
ready client
ip=$(pod_ip web)
got=$(retry 30 fetch client "http://$ip:8080/") || die "client on $cp_node could not fetch web ($ip) on $w1: $got"
[[ $got == "web on web" ]] || die "web at $ip answered '$got'"
check "pod to pod across nodes: client on $cp_node fetched '$got' from $ip on $w1"

kx expose pod web --name web --port 80 --target-port 8080 >/dev/null
cip=$(kx get service web -o jsonpath='{.spec.clusterIP}')
got=$(retry 30 fetch client "http://web.$NS.svc.cluster.local/") || die "web.$NS.svc.cluster.local from client: $got"
[[ $got == "web on web" ]] || die "the Service answered '$got'"
check "ClusterIP Service by its DNS name: web.$NS.svc.cluster.local ($cip) answered '$got'"
got=$(kx exec client -- nslookup kubernetes.default.svc.cluster.local 2>&1) || die "nslookup kubernetes.default: $got"
api=$(kc get service kubernetes -o jsonpath='{.spec.clusterIP}')
grep -q "Address.*$api" <<<"$got" || die "nslookup kubernetes.default gave no $api: $got"
check "DNS: kubernetes.default.svc.cluster.local is $api"

kx expose pod web --name web-np --type NodePort --port 80 --target-port 8080 >/dev/null
np=$(kx get service web-np -o jsonpath='{.spec.ports[0].nodePort}')
for i in $(seq 0 "${#workers[@]}"); do
  addr=$NET.1$i
  got=$(retry 30 curl -sf -m 5 "http://$addr:$np/") || die "NodePort $np on $addr: $got"
  [[ $got == "web on web" ]] || die "NodePort $np on $addr answered '$got'"
done
check "NodePort $np answered from the host on all $((${#workers[@]} + 1)) nodes"

((smoke)) && exit 0

# --- pods on each worker -----------------------------------------------------------------------------------
for w in "${workers[@]}"; do
  web_pod "web-$w" "$w"
  client_pod "client-$w" "$w"
done
for w in "${workers[@]}"; do ready "web-$w" && ready "client-$w"; done

# --- a worker swapped from upstream v0.4.3 to ours with its pods running -----------------------------
# docs/migration.md: install ours over upstream (same package name, paths and units), restart
# the service. The pods must go on as they were: same containers, same IPs, no restarts.
# It comes before any exec into a pod on that node: upstream v0.4.3's exec fails on kubelet
# 1.36+ ("server gave HTTP response to HTTPS client"), which is one reason to swap.
if [[ -n ${CLUSTER_UPSTREAM_NODE:-} ]]; then
  u=$CLUSTER_UPSTREAM_NODE
  was=$($CLUSTER_DOCKER exec "$u" cri-dockerd --version 2>&1 | head -1)
  [[ $was == *"${UPSTREAM_VERSION#v}"* ]] || die "$u should run upstream $UPSTREAM_VERSION, says '$was'"
  state() { kx get pod "web-$u" "client-$u" -o jsonpath='{range .items[*]}{.status.podIP} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount};{end}'; }
  ip=$(pod_ip "web-$u")
  got=$(retry 30 fetch "client-${workers[0]}" "http://$ip:8080/") || die "web-$u on upstream before the swap: $got"
  before=$(state)
  $CLUSTER_DOCKER exec -e DEBIAN_FRONTEND=noninteractive "$u" apt-get install -y -q --reinstall "$CLUSTER_NODE_DEB" >"$OUT/swap-apt.log" 2>&1 ||
    { tail -20 "$OUT/swap-apt.log" >&2; die "apt-get install of our .deb over upstream on $u"; }
  $CLUSTER_DOCKER exec "$u" systemctl restart cri-docker.service || die "systemctl restart cri-docker on $u"
  now=$($CLUSTER_DOCKER exec "$u" cri-dockerd --version 2>&1 | head -1)
  [[ $now != *"${UPSTREAM_VERSION#v}"* ]] || die "$u still runs '$now' after the swap"
  kc wait --for=condition=Ready "node/$u" --timeout=60s >/dev/null || die "$u not Ready after the swap"
  sleep 10 # a few of the kubelet's relists (1 s) and status syncs, through ours
  after=$(state)
  [[ $after == "$before" ]] || die "pods on $u changed in the swap: before '$before', after '$after'"
  ip=$(pod_ip "web-$u")
  got=$(retry 30 fetch "client-${workers[0]}" "http://$ip:8080/") || die "web-$u after the swap: $got"
  [[ $got == "web-$u on web-$u" ]] || die "web-$u answered '$got' after the swap"
  check "swap on $u from '$was' to '$now' with its pods running: same containers, IPs and restart counts ($after), still serving"
fi

# --- pod to pod between the workers -----------------------------------------------------------------
for a in "${workers[@]}"; do
  for b in "${workers[@]}"; do
    [[ $a == "$b" ]] && continue
    ip=$(pod_ip "web-$b")
    got=$(retry 30 fetch "client-$a" "http://$ip:8080/") || die "client-$a could not fetch web-$b ($ip): $got"
    [[ $got == "web-$b on web-$b" ]] || die "web-$b answered '$got'"
  done
done
check "pod to pod between the ${#workers[@]} workers"

# --- kubectl's streams to each worker ---------------------------------------------------------------
port=18080
for w in "${workers[@]}"; do
  got=$(kx logs "web-$w") || die "kubectl logs web-$w: $got"
  grep -q serving <<<"$got" || die "kubectl logs web-$w has no 'serving': $got"
  got=$(kx exec "web-$w" -- cat /www/index.html) || die "kubectl exec on $w: $got"
  [[ $got == "web-$w on web-$w" ]] || die "kubectl exec on $w gave '$got'"
  echo "copied to $w" >"$OUT/cp-$w.txt"
  kx cp "$OUT/cp-$w.txt" "client-$w:/tmp/cp.txt" || die "kubectl cp to client-$w"
  got=$(kx exec "client-$w" -- cat /tmp/cp.txt)
  [[ $got == "copied to $w" ]] || die "kubectl cp to $w: the file says '$got'"
  kx cp "client-$w:/tmp/cp.txt" "$OUT/cp-back-$w.txt" >/dev/null 2>&1 || die "kubectl cp from client-$w"
  cmp -s "$OUT/cp-$w.txt" "$OUT/cp-back-$w.txt" || die "kubectl cp from $w: not the file sent"
  kx port-forward "pod/web-$w" "$port:8080" >"$OUT/port-forward-$w.log" 2>&1 &
  pf=$!
  got=$(retry 30 curl -sf -m 5 "http://127.0.0.1:$port/") || { kill $pf; die "port-forward to web-$w: $got"; }
  kill $pf
  wait $pf 2>/dev/null || true
  [[ $got == "web-$w on web-$w" ]] || die "port-forward to $w gave '$got'"
  port=$((port + 1))
  # attach: a container that echoes what it reads on stdin.
  kx apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: echo-$w}
spec:
  nodeSelector: {kubernetes.io/hostname: $w}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: echo, image: $IMAGE, stdin: true, command: [sh, -c, 'while read l; do echo "got \$l"; done']}
YAML
  ready "echo-$w"
  echo "hello $w" | timeout 30 "${KUBECTL[@]}" -n "$NS" attach -i "echo-$w" >/dev/null 2>&1 || true
  got=$(retry 30 sh -c "$CLUSTER_KUBECTL -n $NS logs echo-$w | grep -x 'got hello $w'") ||
    die "kubectl attach to $w: the container did not echo (logs: $(kx logs "echo-$w" 2>&1))"
  check "kubectl logs, exec, cp both ways, port-forward and attach to pods on $w"
done

# --- a RuntimeClass pod on gVisor ------------------------------------------------------------------
# The nodes' Docker has runtime "gvisor" (runsc); the RuntimeClass's handler reaches Docker as
# HostConfig.Runtime of the pod's sandbox and of its containers.
w=${workers[-1]}
kc apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: gvisor
YAML
kx apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: sandboxed, labels: {app: sandboxed}}
spec:
  runtimeClassName: gvisor
  nodeSelector: {kubernetes.io/hostname: $w}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $IMAGE
    command: [sh, -c, 'mkdir -p /www && echo "sandboxed on \$(hostname)" >/www/index.html && exec httpd -f -p 8080 -h /www']
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
YAML
ready sandboxed
got=$(kx exec sandboxed -- dmesg 2>&1) || die "dmesg in the gVisor pod: $got"
grep -qi gvisor <<<"$got" || die "the pod on RuntimeClass gvisor does not run under gVisor (dmesg: $(head -c 300 <<<"$got"))"
runtimes=$($CLUSTER_DOCKER exec "$w" sh -c 'docker ps -q --filter label=io.kubernetes.pod.name=sandboxed | xargs docker inspect --format "{{.HostConfig.Runtime}}" | sort -u | tr "\n" " "')
[[ $runtimes == "gvisor " ]] || die "Docker on $w runs the gvisor pod's containers with runtimes '$runtimes', want gvisor for the sandbox and every container"
ip=$(pod_ip sandboxed)
got=$(retry 30 fetch "client" "http://$ip:8080/") || die "client on $cp_node could not fetch the gVisor pod ($ip) on $w: $got"
[[ $got == "sandboxed on sandboxed" ]] || die "the gVisor pod answered '$got'"
check "RuntimeClass gvisor: the pod on $w runs under gVisor (dmesg), Docker runs its sandbox and container with runtime gvisor, and it served '$got' across nodes"

# --- a worker's dockerd restarted with its pods running ----------------------------------------------
# Debian's docker.io has no live-restore: its containers stop with it. The kubelet must see them
# exit through us and start them again, and the Service must answer again.
restarts() { kx get pod web -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
before=$(restarts)
t0=$SECONDS
$CLUSTER_DOCKER exec "$w1" systemctl restart docker.service || die "systemctl restart docker on $w1"
retry 180 sh -c "[ \$($CLUSTER_KUBECTL -n $NS get pod web -o jsonpath='{.status.containerStatuses[0].restartCount}') -gt $before ]" >/dev/null ||
  die "web on $w1 not restarted within 180 s of its dockerd's restart (restartCount $(restarts))"
kx wait --for=condition=Ready pod/web --timeout=120s >/dev/null || die "web not Ready again after $w1's dockerd restart"
got=$(retry 60 fetch client "http://web.$NS.svc.cluster.local/") || die "the Service after $w1's dockerd restart: $got"
[[ $got == "web on web" ]] || die "the Service answered '$got' after the restart"
kc wait --for=condition=Ready "node/$w1" --timeout=60s >/dev/null || die "$w1 not Ready after its dockerd's restart"
check "dockerd restarted on $w1: web restarted (restartCount $before -> $(restarts)) and served through its Service again $((SECONDS - t0)) s later"

# --- drain and uncordon -----------------------------------------------------------------------------
w=${workers[-1]}
kx apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread}
spec:
  replicas: 4
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: c, image: $IMAGE, command: [sleep, "3600"]}
YAML
kx rollout status deployment/spread --timeout=120s >/dev/null || die "deployment spread not available"
kc drain "$w" --ignore-daemonsets --delete-emptydir-data --force --timeout=120s >"$OUT/drain.log" 2>&1 ||
  { cat "$OUT/drain.log" >&2; die "kubectl drain $w"; }
kx rollout status deployment/spread --timeout=120s >/dev/null || die "deployment spread not available after the drain"
left=$(kx get pods -o wide --field-selector "spec.nodeName=$w" --no-headers 2>/dev/null | grep -c . || true)
[[ $left == 0 ]] || die "$left pods of $NS still on $w after the drain"
# Nothing of the drained pods is left in the node's Docker but the DaemonSets' (flannel, kube-proxy).
kc uncordon "$w" >/dev/null
[[ $(kc get node "$w" -o jsonpath='{.spec.unschedulable}') != true ]] || die "$w still unschedulable"
check "drain moved every pod off $w, the deployment stayed available; uncordon made it schedulable"
