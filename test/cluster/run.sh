#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# A Kubernetes cluster as users build one, on cri-dockerd: nodes as containers (systemd as PID 1,
# each with its own dockerd and containerd, our .deb installed with apt), `kubeadm init` with
# `--cri-socket unix:///var/run/cri-dockerd.sock` and `kubeadm join`, flannel as the cluster's
# CNI, kube-proxy in iptables mode and CoreDNS, all as kubeadm and their manifests deploy them.
# Then the checks of test/cluster/checks.sh.
#
# Usage: test/cluster/run.sh [--smoke | --no-checks] [--keep] DEB
#   --smoke      one worker and the smoke checks (make e2e-cluster-smoke): a pod on the worker
#                reached from one on the control plane, a ClusterIP and a NodePort Service, DNS
#   --no-checks  the cluster only, all nodes on ours (conformance.sh runs its suite on it)
#   --keep       leave the cluster running (kubeconfig: $OUT/admin.conf; stop it with --down)
#   --down       remove a cluster a --keep run left
# Env: CLUSTER_OUT (logs; default a new /tmp/cri-dockerd-cluster.XXXXXX, kept),
#      CLUSTER_WORKERS (default 2; --smoke: 1), E2E_CACHE (default /var/cache/cri-dockerd-ci),
#      CLUSTER_LOCK_HELD=1: the caller holds /var/cache/cri-dockerd-ci/cluster.lock,
#      CLUSTER_REGISTRY_DATA: a docker-registry storage directory (test/e2e-node/images.sh's
#      stand-ins under their public names) to serve on the bridge; the nodes' Docker pulls
#      registry.k8s.io and gcr.io from it over plain HTTP (a proxy, as test/e2e-node/run.sh does).
#
# The nodes run on a private dockerd (own data root under /var/lib/cri-dockerd-cluster, kept
# between runs with the node image in it; own socket, containerd namespace and bridge, no
# iptables of its own), so nothing here touches the containers of the machine's other dockerds.
# The nodes' bridge is private: nothing leaves this machine.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=cluster
# log lines carry the time of day.
LOG_STAMP=clock
# K8S_VERSION: kubeadm init's --kubernetes-version.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
NAME=cri-dockerd-cluster
DATA=/var/lib/$NAME
RUN=/run/$NAME
BRIDGE=crid-cluster
POD_CIDR=10.244.0.0/16
CRI_SOCKET=unix:///var/run/cri-dockerd.sock

smoke=0 keep=0 down=0 checks=1 deb=
for a in "$@"; do
  case $a in
  --smoke) smoke=1 ;;
  --no-checks) checks=0 ;;
  --keep) keep=1 ;;
  --down) down=1 ;;
  -*) echo "usage: $0 [--smoke | --no-checks] [--keep] DEB | --down" >&2; exit 2 ;;
  *) deb=$a ;;
  esac
done
WORKERS=${CLUSTER_WORKERS:-$((smoke ? 1 : 2))}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
dk() { docker -H "unix://$RUN/docker.sock" "$@"; }

[[ $(id -u) == 0 ]] || die "needs root"
for tool in docker dockerd runc iptables; do
  command -v "$tool" >/dev/null || die "$tool not found (make setup installs Docker)"
done
need=()
for tool in debootstrap curl; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
fi

stop_dockerd() {
  [[ -f $RUN/docker.pid ]] || return 0
  local pid
  pid=$(cat "$RUN/docker.pid")
  if kill -0 "$pid" 2>/dev/null; then
    dk ps -aq | xargs -r docker -H "unix://$RUN/docker.sock" rm -fv >/dev/null 2>&1 || true
    dk network rm "$NAME" >/dev/null 2>&1 || true
  fi
  stop_pid "$pid" "the private dockerd" 30
  rm -f "$RUN/docker.pid"
}
teardown() {
  if [[ -f $RUN/registry.pid ]]; then stop_pid "$(cat "$RUN/registry.pid")" "the registry" 5; rm -f "$RUN/registry.pid"; fi
  stop_dockerd
  iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -i "$BRIDGE" -j ACCEPT 2>/dev/null || true
  for b in "$BRIDGE" "$BRIDGE-0"; do ip link show "$b" >/dev/null 2>&1 && ip link del "$b"; done
  { findmnt -rn -o TARGET | grep -E "^($RUN|$DATA)/" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$RUN"
}

mkdir -p /var/cache/cri-dockerd-ci
# CLUSTER_LOCK_HELD: the caller (conformance.sh) holds the lock across --keep and --down.
if [[ -z ${CLUSTER_LOCK_HELD:-} ]]; then
  exec 9>/var/cache/cri-dockerd-ci/cluster.lock
  flock -w 1800 9 || die "another cluster run holds /var/cache/cri-dockerd-ci/cluster.lock"
fi
if ((down)); then
  teardown
  log "removed"
  exit 0
fi
[[ -f $deb ]] || die "usage: $0 [--smoke] [--keep] DEB (make release builds dist/cri-dockerd_*_amd64.deb)"
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")

OUT=${CLUSTER_OUT:-$(mktemp -d /tmp/cri-dockerd-cluster.XXXXXX)}
mkdir -p "$OUT"
log "logs in $OUT"
K8S=$("$ROOT/test/e2e/build-k8s.sh" | tail -n 1)
CBIN=$("$HERE/build.sh" | tail -n 1)
# The full run's last worker starts on upstream cri-dockerd v0.4.3 (hack/upstream.sh builds it)
# and is swapped to ours with its pods running (checks.sh).
UPSTREAM_NODE=
if ((!smoke && checks)); then
  UPSTREAM_BIN=$("$ROOT/hack/upstream.sh" | tail -n 1)
  UPSTREAM_NODE=crid-w$WORKERS
fi

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if ((rc != 0)); then
    for n in "${nodes[@]}"; do
      dk exec "$n" journalctl --no-pager -b -u kubelet -u cri-docker -u docker >"$OUT/$n.journal.log" 2>&1
      dk exec "$n" docker ps -a >"$OUT/$n.docker-ps.log" 2>&1
    done
    if [[ -f $OUT/admin.conf ]]; then
      "$K8S/kubectl" --kubeconfig "$OUT/admin.conf" get pods -A -o wide >"$OUT/pods.log" 2>&1
      "$K8S/kubectl" --kubeconfig "$OUT/admin.conf" get events -A >"$OUT/events.log" 2>&1
      for ns in kube-system kube-flannel; do
        "$K8S/kubectl" --kubeconfig "$OUT/admin.conf" -n "$ns" logs --all-containers --prefix --tail 40 --selector 'tier!=control-plane' >"$OUT/$ns.logs" 2>&1
      done
    fi
    log "node journals and pods in $OUT"
  fi
  if ((keep && rc == 0)); then
    log "cluster kept: KUBECONFIG=$OUT/admin.conf; $0 --down removes it"
  else
    teardown
  fi
  exit "$rc"
}
nodes=()
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the private dockerd ----------------------------------------------------------------------------
teardown # what a killed run left (we hold the lock)
NET=
for net in 10.216.7 10.217.7 10.218.7 172.31.216; do
  ip -4 route | grep -q "^$net\." && continue
  NET=$net
  break
done
[[ -n $NET ]] || die "no free /24 for the nodes' bridge"
mkdir -p "$RUN" "$DATA"
# The private dockerd's default bridge, unused: with --bridge none dockerd deletes the machine's
# docker0, which the machine's own dockerd needs.
ip link add "$BRIDGE-0" type bridge
ip addr add 169.254.216.1/30 dev "$BRIDGE-0"
ip link set "$BRIDGE-0" up
# The nodes are privileged containers, which this machine's runc cannot start as it is
# (runc-nosysresource says why). Their cgroups go under one parent of their own; cgroupfs, as
# this machine has no systemd. 9>&-: what outlives a --keep run must not hold the lock.
install -m 755 "$HERE/runc-nosysresource" "$RUN/runc"
ln -sf "$(command -v runc)" "$RUN/runc.real"
dockerd --host "unix://$RUN/docker.sock" --data-root "$DATA/docker" --exec-root "$RUN/exec" \
  --pidfile "$RUN/docker.pid" --bridge "$BRIDGE-0" --iptables=false --ip-masq=false \
  --add-runtime "crid-runc=$RUN/runc" --default-runtime crid-runc \
  --containerd-namespace crid-cluster --containerd-plugins-namespace crid-cluster-plugins \
  --cgroup-parent /cri-dockerd-cluster >"$OUT/dockerd.log" 2>&1 9>&- &
wait_for 60 "the private dockerd" quiet dk version || { tail -20 "$OUT/dockerd.log" >&2; die "the private dockerd did not answer within 60 s"; }
dk network rm "$NAME" >/dev/null 2>&1 || true # a killed run's
dk network create -d bridge --subnet "$NET.0/24" --gateway "$NET.1" \
  -o com.docker.network.bridge.name="$BRIDGE" "$NAME" >/dev/null
# The machine's FORWARD policy is DROP (its own dockerd's) and bridged traffic passes it
# (br_netfilter): let the nodes talk to each other and answer the host.
iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
iptables -I FORWARD -o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
# The stand-in registry, on the host's end of the bridge.
REGISTRY=
if [[ -n ${CLUSTER_REGISTRY_DATA:-} ]]; then
  [[ -x /usr/bin/docker-registry ]] || die "CLUSTER_REGISTRY_DATA needs Debian's docker-registry"
  REGISTRY=$NET.1:5000
  printf 'version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: "%s"}\n' \
    "$CLUSTER_REGISTRY_DATA" "$REGISTRY" >"$RUN/registry.yml"
  /usr/bin/docker-registry serve "$RUN/registry.yml" >"$OUT/registry.log" 2>&1 9>&- &
  echo $! >"$RUN/registry.pid"
  wait_for 10 "the registry" quiet curl -sf "http://$REGISTRY/v2/" || die "the registry did not answer on $REGISTRY"
fi

# --- images -----------------------------------------------------------------------------------------
NODE_IMG=$("$HERE/image.sh" node | tail -n 1)
IMG=$(DOCKER_HOST="unix://$RUN/docker.sock" "$HERE/image.sh" images "$K8S" "$CBIN" | tail -n 1)
node_image=$NAME/node:$(basename "$NODE_IMG")
if ! dk image inspect "$node_image" >/dev/null 2>&1; then
  t0=$(now)
  dk import -c 'ENTRYPOINT ["/sbin/init"]' -c 'ENV container=docker' \
    "$NODE_IMG/node.tar" "$node_image" >/dev/null
  log "imported $node_image in $(since "$t0") s"
fi
# Older node images go.
dk image ls --format '{{.Repository}}:{{.Tag}}' "$NAME/node" | grep -vx "$node_image" | xargs -r docker -H "unix://$RUN/docker.sock" rmi >/dev/null 2>&1 || true
# What the nodes mount: our .deb and kubeadm's patches at /crid, the images at /crid-img.
share=$RUN/share
mkdir -p "$share/patches"
cp "$deb" "$share/"
# This machine has cgroup v1 only; the kubelet v1.37 refuses to start on it unless told
# (failCgroupV1). The only change to kubeadm's defaults, through kubeadm's own --patches.
printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n' \
  >"$share/patches/kubeletconfiguration+strategic.yaml"

# --- nodes ------------------------------------------------------------------------------------------
start_node() { # NAME IP
  dk run -d --name "$1" --hostname "$1" --privileged --cgroupns private \
    --network "$NAME" --ip "$2" --security-opt seccomp=unconfined --stop-signal SIGRTMIN+3 \
    --tmpfs /run:exec,mode=755 --tmpfs /tmp:exec --volume /var \
    -v "$K8S/kubelet:/usr/bin/kubelet:ro" -v "$K8S/kubeadm:/usr/bin/kubeadm:ro" \
    -v "$K8S/kubectl:/usr/bin/kubectl:ro" -v "$share:/crid:ro" -v "$IMG:/crid-img:ro" \
    ${UPSTREAM_NODE:+-v "$UPSTREAM_BIN:/crid-upstream/cri-dockerd:ro"} \
    "$node_image" >/dev/null
  nodes+=("$1")
}
node_ready() { # NAME: systemd up, Docker up, our .deb installed and its socket listening, images in
  local n=$1 state
  wait_for 120 "$n's docker.service" quiet dk exec "$n" systemctl is-active docker.service ||
    { state=$(dk exec "$n" systemctl is-system-running 2>&1); die "$n: docker.service not active within 120 s (systemd: $state)"; }
  # Docker's embedded DNS (127.0.0.11) as the node's resolver would be CoreDNS's own address in
  # its pod, a loop its loop plugin stops on; no DNS server is reachable from here, so the
  # upstream is the host's end of the bridge, where none answers: names outside the cluster fail.
  dk exec "$n" sh -c "echo 'nameserver $NET.1' >/etc/resolv.conf"
  if [[ -n $REGISTRY ]]; then
    # Pulls of the public registries' names over plain HTTP (insecure-registries: https is tried
    # first, through a proxy that refuses at once, then http through HTTP_PROXY), as
    # test/e2e-node/run.sh does for its dockerd.
    dk exec "$n" sh -c "sed -i '1a \"insecure-registries\": [\"registry.k8s.io\", \"gcr.io\", \"k8s.gcr.io\", \"invalid.registry.k8s.io\"],' /etc/docker/daemon.json &&
      mkdir -p /etc/systemd/system/docker.service.d &&
      printf '[Service]\nEnvironment=HTTP_PROXY=http://$REGISTRY HTTPS_PROXY=http://$NET.1:1 NO_PROXY=\n' >/etc/systemd/system/docker.service.d/registry.conf &&
      systemctl daemon-reload && systemctl restart docker.service" || die "$n: Docker with the stand-in registry"
  fi
  dk exec -e DEBIAN_FRONTEND=noninteractive "$n" apt-get install -y -q "/crid/$(basename "$deb")" >"$OUT/$n.apt.log" 2>&1 ||
    { tail -20 "$OUT/$n.apt.log" >&2; die "$n: apt-get install of our .deb"; }
  dk exec "$n" systemctl is-active cri-docker.socket >/dev/null || die "$n: cri-docker.socket not active after the install"
  dk exec "$n" docker load -q -i /crid-img/images.tar >"$OUT/$n.load.log" 2>&1 ||
    { tail -5 "$OUT/$n.load.log" >&2; die "$n: docker load"; }
  if [[ $n == "$UPSTREAM_NODE" ]]; then
    # Upstream's binary under the same path and units (its package has the same ones), before
    # the socket has started either.
    dk exec "$n" cp /crid-upstream/cri-dockerd /usr/bin/cri-dockerd
  fi
}
t0=$(now)
start_node crid-cp "$NET.10"
for i in $(seq "$WORKERS"); do start_node "crid-w$i" "$NET.1$i"; done
for n in "${nodes[@]}"; do node_ready "$n" & done
for _ in "${nodes[@]}"; do wait -n || die "a node did not come up"; done
log "${#nodes[@]} nodes up (systemd, docker, our .deb, images) in $(since "$t0") s"

# --- kubeadm ----------------------------------------------------------------------------------------
t0=$(now)
# SystemVerification: kubeadm refuses cgroup v1 unless the kubelet's FailCgroupV1 is false (the
# patch) and this check is skipped, as its message says.
dk exec crid-cp kubeadm init --cri-socket "$CRI_SOCKET" --kubernetes-version "$K8S_VERSION" \
  --pod-network-cidr "$POD_CIDR" --apiserver-advertise-address "$NET.10" --patches /crid/patches \
  --ignore-preflight-errors SystemVerification \
  >"$OUT/kubeadm-init.log" 2>&1 || { tail -40 "$OUT/kubeadm-init.log" >&2; die "kubeadm init"; }
log "kubeadm init in $(since "$t0") s"
dk exec crid-cp cat /etc/kubernetes/admin.conf >"$OUT/admin.conf"
kc() { "$K8S/kubectl" --kubeconfig "$OUT/admin.conf" "$@"; }
join=$(dk exec crid-cp kubeadm token create --print-join-command)
t0=$(now)
for n in "${nodes[@]:1}"; do
  # shellcheck disable=SC2086
  dk exec "$n" $join --cri-socket "$CRI_SOCKET" --patches /crid/patches --ignore-preflight-errors SystemVerification >"$OUT/kubeadm-join-$n.log" 2>&1 &
done
for n in "${nodes[@]:1}"; do wait -n || { tail -30 "$OUT"/kubeadm-join-*.log >&2; die "kubeadm join"; }; done
log "kubeadm join of $WORKERS workers in $(since "$t0") s"

# --- the cluster's network: flannel ------------------------------------------------------------------
t0=$(now)
kc apply -f "$HERE/flannel.yaml" >"$OUT/flannel-apply.log"
wait_for 300 "the nodes Ready" quiet kc wait --for=condition=Ready node --all --timeout=5s ||
  { kc get nodes -o wide >&2; die "nodes not Ready within 300 s of flannel's apply"; }
log "all ${#nodes[@]} nodes Ready $(since "$t0") s after flannel's apply"
kc -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null ||
  { kc -n kube-system get pods -o wide >&2; die "CoreDNS not available within 180 s"; }
log "CoreDNS available"

# --- checks -----------------------------------------------------------------------------------------
export CLUSTER_KUBECTL="$K8S/kubectl --kubeconfig $OUT/admin.conf" CLUSTER_DOCKER="docker -H unix://$RUN/docker.sock" CLUSTER_NET=$NET CLUSTER_OUT=$OUT \
  CLUSTER_UPSTREAM_NODE=$UPSTREAM_NODE CLUSTER_NODE_DEB=/crid/${deb##*/}
if ((smoke)); then
  "$HERE/checks.sh" --smoke "${nodes[@]}"
elif ((checks)); then
  "$HERE/checks.sh" "${nodes[@]}"
fi
log "PASS"
