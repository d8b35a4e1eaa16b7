#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Kubernetes' node e2e suite (k8s.io/kubernetes v1.37.2 test/e2e_node) against a cri-dockerd
# binary, offline, with the kubelet v1.37.2 of test/e2e/build-k8s.sh.
#
# Usage: run.sh [--fast] BINARY
#   --fast   the fast subset (make e2e-node-fast: FAST_FOCUS below, about 10 minutes here) instead of the
#            full selection
# Env:
#   E2E_NODE_OUT     where logs and reports go (default: a new /tmp/cri-dockerd-e2e-node.XXXXXX)
#   E2E_NODE_PROCS   ginkgo workers for the parallel phase (default 4)
#   E2E_NODE_FOCUS / E2E_NODE_SKIP   replace the parallel phase's selection (regexps);
#                    E2E_NODE_SERIAL=0 drops the serial phase
#   E2E_NODE_EXPECTED  the expected-failures file (default expected-failures.txt here)
#
# The full selection, in two phases (each starts its own kubelet through the suite):
#   1. parallel: [NodeConformance] and every "[sig-node] RuntimeClass" spec, without [Flaky],
#      [Slow], [Serial], [Disruptive];
#   2. serial: the [Serial] "[sig-node] Container Runtime blackbox test" specs (image pulls: from
#      the stand-in registry, an invalid registry, agnhost's fake private registry on hostPort
#      5000 with and without a pull secret).
# test/lib/expected-failures.py compares the failures with expected-failures.txt; the run exits non-zero on any
# failure not listed there.
#
# What it sets up (and takes down on exit, pass or fail):
#   - a private dockerd (own data root, exec root, containerd namespace, bridge crid-e2en0, no
#     iptables), as test/e2e/run.sh does: the kubelet removes every pod it did not start.
#     It reaches the registry through HTTP_PROXY: the suite's fixed names (registry.k8s.io/...)
#     are pulled over plain HTTP from Debian's docker-registry on 127.0.0.2:80, which
#     images.sh fills with the stand-ins (kept in /var/cache/cri-dockerd-ci/e2e-node/registry);
#     the host's /etc/hosts and /etc/docker/certs.d (critest's registry) are not touched;
#   - cri-dockerd on a temporary socket, Docker's bridge networking, the sandbox image
#     registry.k8s.io/pause:3.10.2, `--runtime-handler test-handler=runc` (PodOverhead and
#     RuntimeClass specs use handler test-handler; the private dockerd also has a runtime of that
#     name, for a binary without --runtime-handler such as upstream cri-dockerd);
#   - the suite's kubelet (/var/lib/kubelet as the suite wants) with cgroupfs on cgroup v1
#     (failCgroupV1: false), a bridge node IP, and no system/kubelet/runtime cgroups (without
#     systemd the suite would move every process of the machine into /system); systemd-run,
#     systemctl and journalctl are kept off PATH (no systemd here: the suite would start the
#     kubelet as a transient unit).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=e2e-node

FAST=0
if [[ ${1:-} == --fast ]]; then FAST=1; shift; fi
[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 [--fast] BINARY" >&2; exit 2; }
BINARY=$1
[[ -x $BINARY ]] || { echo "run.sh: $BINARY is not an executable" >&2; exit 2; }
BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")

DOCKER_CLI=/usr/bin/docker # Debian's client, matching the 20.10 daemon
NODE=crid-e2e-node
BRIDGE=crid-e2en0
REG_ADDR=127.0.0.2:80
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
PROCS=${E2E_NODE_PROCS:-4}
EXPECTED=${E2E_NODE_EXPECTED:-$HERE/expected-failures.txt}
CACHE=${E2E_CACHE:-/var/cache/cri-dockerd-ci}

PARALLEL_FOCUS='\[NodeConformance\]|\[sig-node\] RuntimeClass'
PARALLEL_SKIP='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]'
SERIAL_FOCUS='\[sig-node\] Container Runtime blackbox test .*\[Serial\]'
SERIAL_SKIP='\[Flaky\]|\[Disruptive\]'
# The fast subset (about 220 specs, 15 spec-minutes: under 10 minutes here with the serial
# phase): what cri-dockerd answers and the kubelet shows, each spec a few seconds: Container
# Runtime, RuntimeClass and PodOverhead, security context, Pods, downward API, env, configMap and
# secrets (env and volumes), init containers and part of the sidecar lifecycle, lifecycle hooks,
# hostname/FQDN, logs, pod networking, emptyDir and projected volumes. Left to the full run: the
# probes (minutes each), the volume update specs, [Feature:*] specs and those that need
# privileged containers (this VM cannot run them). "Pod " also matches the in-place resize
# specs ([Conformance], not [NodeConformance]): they need ContainerStatus.resources.
FAST_FOCUS='\[sig-node\] (Container Runtime blackbox|RuntimeClass|Kubelet PodOverhead|Security Context|Kubelet |Pods |Pod |Downward API|Variable Expansion|Sysctls|ConfigMap|Secrets|Containers should|InitContainer|Container Lifecycle Hook|Lifecycle sleep|Override hostname|ContainerLogPath|Ephemeral|KubeletManagedEtcHosts|Deleted|Terminate|PodOSRejection|Hostname of Pod|Containers Lifecycle when (using a Pod with restartPolicy=Never, three init|using a restartable init container in a Pod with restartPolicy=Never when an Init container))|\[sig-network\] Networking|\[sig-storage\] (EmptyDir|ConfigMap|Secrets|Projected|Downward API volume)'
FAST_SKIP='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]|\[Feature:[^]]*\]|updates should be reflected in volume|privileged'
if ((FAST)); then
  PARALLEL_FOCUS=$FAST_FOCUS
  PARALLEL_SKIP=$FAST_SKIP
fi
PARALLEL_FOCUS=${E2E_NODE_FOCUS:-$PARALLEL_FOCUS}
PARALLEL_SKIP=${E2E_NODE_SKIP:-$PARALLEL_SKIP}
SERIAL=${E2E_NODE_SERIAL:-1}


# One run at a time on a machine, shared with test/e2e/run.sh: the kubelet's cgroups
# (/kubepods), /var/lib/kubelet, its ports and the kernel tunables it sets are global.
mkdir -p "$CACHE/e2e-node"
exec 9>"$CACHE/e2e.lock"
flock -w 3600 9 || die "another e2e run holds $CACHE/e2e.lock"
t_start=$SECONDS

# --- setup ------------------------------------------------------------------------------------
"$ROOT/hack/docker.sh" >/dev/null
# docker-registry serves the stand-ins; images.sh copies dig into agnhost's.
[[ -x /usr/bin/docker-registry && -x /usr/bin/dig ]] || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-registry bind9-dnsutils >/dev/null ||
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-registry bind9-dnsutils >/dev/null; }
}
t0=$SECONDS
E2EBIN=$("$HERE/build.sh" | tail -n 1)
K8S=$("$ROOT/test/e2e/build-k8s.sh" | tail -n 1)
CRICTL=$("$ROOT/test/critest/build-tools.sh" | tail -n 1)/crictl
log "binaries ready in $((SECONDS - t0)) s ($E2EBIN, $K8S)"

for port in 6443 10248 10250 10255 5000; do
  ! ss -Hltn "sport = :$port" | grep -q . || die "port $port is taken: $(ss -Hltnp "sport = :$port")"
done
[[ ! -e /var/lib/kubelet ]] || die "/var/lib/kubelet exists (a kubelet of this machine, or a killed run: remove it)"

OUT=${E2E_NODE_OUT:-$(mktemp -d /tmp/cri-dockerd-e2e-node.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUN=$(mktemp -d /tmp/crid-e2en.XXXXXX) # short: unix socket paths are limited
log "logs and reports in $OUT"

# --- cleanup (registered before anything starts) ----------------------------------------------
declare -A pids=()
stop_proc() { # NAME [SECONDS]: stop_pid of pids[NAME], which it then forgets
  stop_pid "${pids[$1]:-}" "$1" "${2:-15}"
  unset "pids[$1]"
}
TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A tunables=()
for t in "${TUNABLES[@]}"; do [[ -r /proc/sys/$t ]] && tunables[$t]=$(cat "/proc/sys/$t"); done
cgroups_existed=()
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [[ -d $d ]] && cgroups_existed+=("$d"); done
# /var/log/pods (log_path_test reads it as a hostPath): remove what the run adds to it.
pod_logs_before=$(find /var/log/pods -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null || true)
pod_logs_existed=0
[[ -e /var/log/pods ]] && pod_logs_existed=1

# kubelets the suite started: children of the test binary, which the suite's own cleanup kills
# when it ends normally; a killed run leaves them, so look them up by their --root-dir too.
kill_suite_kubelets() {
  local p
  for p in $(pgrep -x kubelet 2>/dev/null || true); do
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$K8S/kubelet" ]] || continue
    tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "--config $RUN/" || continue
    stop_pid "$p" "the suite's kubelet ($p)" 15
  done
}
remove_all_pods() { # every pod on the private dockerd is ours
  if [[ -S $RUN/cri.sock ]]; then
    timeout 90 "$CRICTL" --runtime-endpoint "unix://$RUN/cri.sock" --timeout 30s rmp -fa >/dev/null 2>&1 || true
  fi
  if [[ -S $RUN/docker.sock ]]; then
    local left
    left=$(dockerp ps -aq 2>/dev/null || true)
    # shellcheck disable=SC2086
    [[ -z $left ]] || dockerp rm -f $left >/dev/null 2>&1 || true
  fi
}
# stop_suite: the ginkgo CLI, its workers and the suite's services and kubelet, all in the
# process group run_phase gave the CLI (workers outlive a CLI killed alone).
stop_suite() {
  stop_group "${pids[suite]:-}" "the suite" 30
  unset "pids[suite]"
}
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  stop_suite
  kill_suite_kubelets
  [[ -n ${pids[crid]:-} ]] && remove_all_pods
  stop_proc crid
  stop_proc events 2
  stop_proc dockerd 30
  stop_proc registry 5
  # Mounts left by the kubelet (its rshared root dir, pod volumes) and dockerd, deepest first.
  awk -v run="$RUN/" 'index($5, run) == 1 || $5 == "/var/lib/kubelet" || index($5, "/var/lib/kubelet/") == 1 { print $5 }' \
    /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  rm -rf "$RUN" /var/lib/kubelet
  if ((pod_logs_existed)); then
    comm -13 <(echo "$pod_logs_before" | sort) <(find /var/log/pods -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort) |
      while read -r d; do [[ -n $d ]] && rm -rf "/var/log/pods/$d"; done
  else
    rm -rf /var/log/pods
  fi
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  while iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; do
    iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  done
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $d ]] || continue
    [[ " ${cgroups_existed[*]-} " == *" $d "* ]] && continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d $d ]] && log "could not remove cgroup $d"
  done
  for t in "${!tunables[@]}"; do
    [[ $(cat "/proc/sys/$t") == "${tunables[$t]}" ]] || echo "${tunables[$t]}" >"/proc/sys/$t" 2>/dev/null
  done
  log "total $((SECONDS - t_start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the registry (stand-ins under the suite's names) --------------------------------------------
REG=$CACHE/e2e-node/registry
mkdir -p "$REG/data"
cat >"$RUN/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $REG/data
  delete:
    enabled: true
http:
  addr: $REG_ADDR
EOF
! ss -Hltn "sport = :${REG_ADDR##*:}" | grep -q "${REG_ADDR%:*}:" || die "$REG_ADDR is taken"
/usr/bin/docker-registry serve "$RUN/registry.yml" >"$OUT/registry.log" 2>&1 &
pids[registry]=$!
wait_for 10 "the registry" quiet curl -sf "http://$REG_ADDR/v2/" || die "the registry did not answer on $REG_ADDR"

# --- a private dockerd --------------------------------------------------------------------------
dockerp() { "$DOCKER_CLI" -H "unix://$RUN/docker.sock" "$@"; }
# (One run at a time holds the lock: a bridge of that name is a killed run's.)
NODE_IP=$(make_bridge "$BRIDGE" 10.216.7 10.217.7 10.218.7 172.31.216) || die "cannot make the private bridge $BRIDGE"
# Pod to pod on the bridge: with br_netfilter, bridged packets go through FORWARD, whose policy
# the shared dockerd sets to DROP (this dockerd adds no rules: --iptables=false).
iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
# Pulls of the suite's hosts go over plain HTTP to the registry (insecure-registries: https is
# tried first, through a proxy that refuses at once, then http through HTTP_PROXY). Go never
# proxies loopback names: agnhost's fake registry (localhost:5000) is reached directly.
# The runtimes of /etc/docker/daemon.json, and test-handler (runc) for a binary that has no
# --runtime-handler alias (upstream cri-dockerd passes the handler name to Docker as it is).
jq --arg runc "$(command -v runc)" '{runtimes: ((.runtimes // {}) + {"test-handler": {path: $runc}}),
  "insecure-registries": ["registry.k8s.io", "gcr.io", "k8s.gcr.io", "invalid.registry.k8s.io"]}' \
  /etc/docker/daemon.json >"$RUN/daemon.json"
log "starting a private dockerd on unix://$RUN/docker.sock (bridge $BRIDGE, $NODE_IP/24)"
HTTP_PROXY=http://$REG_ADDR HTTPS_PROXY=http://127.0.0.2:1 NO_PROXY='' \
  dockerd --config-file "$RUN/daemon.json" --host "unix://$RUN/docker.sock" --data-root "$RUN/docker" \
  --exec-root "$RUN/dx" --pidfile "$RUN/docker.pid" --bridge "$BRIDGE" --iptables=false --ip-masq=false \
  --containerd-namespace crid-e2en --containerd-plugins-namespace crid-e2en-plugins \
  >"$OUT/dockerd.log" 2>&1 &
pids[dockerd]=$!
wait_for 60 "the private dockerd" quiet dockerp version || { tail -20 "$OUT/dockerd.log" >&2; die "private dockerd did not answer within 60 s"; }
# Docker's container events (die with exit codes, kill with signals, oom) outlive the containers
# the kubelet removes: the record to explain an unexpected exit.
dockerp events --filter type=container --format '{{.TimeNano}} {{.Action}} {{.Actor.ID}} {{json .Actor.Attributes}}' \
  >"$OUT/docker-events.log" 2>&1 &
pids[events]=$!

t0=$SECONDS
REGISTRY_DATA=$REG/data "$HERE/images.sh" "unix://$RUN/docker.sock" "$E2EBIN" "http://$REG_ADDR"
images=$(IMAGES_LIST_ONLY=1 "$HERE/images.sh" "unix://$RUN/docker.sock" "$E2EBIN" "http://$REG_ADDR")
for img in $images; do
  dockerp image inspect "$img" >/dev/null 2>&1 || dockerp pull -q "$img" >/dev/null || die "pull of $img failed"
done
# The base of a fresh build has no name the suite knows: keep only the stand-ins.
dockerp image ls -q cri-dockerd-ci/e2e-node-base | xargs -r "$DOCKER_CLI" -H "unix://$RUN/docker.sock" rmi -f >/dev/null 2>&1 || true
log "images served and pulled in $((SECONDS - t0)) s"

# --- cri-dockerd ----------------------------------------------------------------------------------
handler_flag=()
"$BINARY" --help 2>&1 | grep -q -- --runtime-handler && handler_flag=(--runtime-handler test-handler=runc)
log "starting $BINARY on unix://$RUN/cri.sock (log: $OUT/cri-dockerd.log)"
"$BINARY" --container-runtime-endpoint "unix://$RUN/cri.sock" --docker-endpoint "unix://$RUN/docker.sock" \
  --cri-dockerd-root-directory "$RUN/crid" --network-plugin= --pod-infra-container-image "$PAUSE_IMAGE" \
  "${handler_flag[@]}" --log-level info >"$OUT/cri-dockerd.log" 2>&1 &
pids[crid]=$!
echo "${pids[crid]}" >"$RUN/cri-dockerd.pid"
wait_for 30 cri-dockerd quiet "$CRICTL" --runtime-endpoint "unix://$RUN/cri.sock" version ||
  { tail -20 "$OUT/cri-dockerd.log" >&2; die "cri-dockerd did not serve within 30 s"; }

# --- the suite -------------------------------------------------------------------------------------
# Base kubelet configuration; the suite adds its own overrides (auth, ports, static pod path).
cat >"$RUN/kubelet-base.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /
failCgroupV1: false
failSwapOn: false
# No CAP_SYS_RESOURCE on this VM: the kubelet cannot lower its own OOM score.
oomScoreAdj: 0
makeIPTablesUtilChains: false
serializeImagePulls: false
fileCheckFrequency: 10s
volumeStatsAggPeriod: 10s
podCIDR: 10.100.0.0/24
healthzBindAddress: 127.0.0.1
# Never collect the stand-ins or evict pods because of what else this machine runs.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionPressureTransitionPeriod: 30s
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
EOF
# Every program of /usr/bin and /bin but systemd's (the suite looks them up on PATH).
mkdir -p "$RUN/path"
for f in /usr/bin/*; do
  case ${f##*/} in systemd-run | systemctl | journalctl) continue ;; esac
  ln -s "$f" "$RUN/path/${f##*/}"
done
# The suite runs the kubelet found beside its own binary (its --k8s-bin-dir flag belongs to the
# remote runner only).
mkdir -p "$RUN/suite"
ln -s "$E2EBIN/e2e_node.test" "$RUN/suite/e2e_node.test"
ln -s "$K8S/kubelet" "$RUN/suite/kubelet"
SUITE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:$RUN/path:/usr/local/go/bin
mkdir -p "$RUN/work" "$RUN/tmp"

TEST_ARGS=(
  --container-runtime-endpoint "unix://$RUN/cri.sock"
  --container-runtime-process-name cri-dockerd --container-runtime-pid-file "$RUN/cri-dockerd.pid"
  --node-name "$NODE" --prepull-images=false
  --kubelet-config-file "$RUN/kubelet-base.yaml"
  --kubelet-flags "--node-ip=$NODE_IP --system-cgroups= --kubelet-cgroups= --runtime-cgroups="
  --server-start-timeout 3m
)

# run_phase NAME PROCS FOCUS SKIP: one ginkgo run; its JUnit report is $OUT/junit-NAME.xml.
run_phase() {
  local name=$1 procs=$2 focus=$3 skip=$4 rc=0 t=$SECONDS
  mkdir -p "$OUT/$name"
  log "phase $name: $procs worker(s), focus '$focus' (log: $OUT/$name/ginkgo.log)"
  (
    cd "$RUN/work"
    # shellcheck disable=SC2030
    export PATH=$SUITE_PATH TMPDIR=$RUN/tmp # the suite's etcd data and temp files go with the run
    exec setsid "$E2EBIN/ginkgo" run --procs="$procs" --no-color --timeout=4h --poll-progress-after=10m \
      --focus="$focus" --skip="$skip" --junit-report="$OUT/junit-$name.xml" \
      "$RUN/suite/e2e_node.test" -- "${TEST_ARGS[@]}" --report-dir "$OUT/$name"
  ) >"$OUT/$name/ginkgo.log" 2>&1 &
  pids[suite]=$!
  wait "${pids[suite]}" || rc=$?
  stop_suite # what the suite left of its group
  kill_suite_kubelets
  grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!|PASS|FAIL)' "$OUT/$name/ginkgo.log" | sed 's/^/  /' >&2 || true
  log "phase $name: exit $rc in $((SECONDS - t)) s"
  remove_all_pods
}

run_phase parallel "$PROCS" "$PARALLEL_FOCUS" "$PARALLEL_SKIP"
reports=("$OUT/junit-parallel.xml")
if ((SERIAL)); then
  run_phase serial 1 "$SERIAL_FOCUS" "$SERIAL_SKIP"
  reports+=("$OUT/junit-serial.xml")
fi

partial=()
((FAST)) || [[ -n ${E2E_NODE_FOCUS:-} ]] && partial=(--partial)
python3 "$ROOT/test/lib/expected-failures.py" --name e2e-node "${partial[@]}" "$EXPECTED" "${reports[@]}"
