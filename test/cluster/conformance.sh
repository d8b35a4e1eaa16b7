#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Kubernetes Conformance on a cluster of cri-dockerd nodes: run.sh's kubeadm cluster (a control
# plane and two workers, every node on our .deb), then e2e.test v1.37.2 (conformance-build.sh)
# as Sonobuoy and hydrophone run it: the [Conformance] specs without [Serial] in parallel, then
# the [Serial] ones alone; then Kubernetes' pod startup SLO (startup-slo.py: 30 pods per worker
# posted at once, p99 from creation to Running), on ours and on upstream cri-dockerd v0.4.3 in
# turn on the same cluster, for the ratio.
#
# Usage: conformance.sh [--parallel-only | --serial-only | --slo-only] [--no-slo] DEB
# Env: CONFORMANCE_OUT (logs and JUnit reports; default a new /tmp/cri-dockerd-conformance.XXXXXX)
#      CONFORMANCE_PROCS (ginkgo workers of the parallel phase; default 4)
#      CONFORMANCE_FOCUS (replaces the parallel phase's focus: a subset, reported as partial)
#      CONFORMANCE_EXPECTED (default conformance-expected-failures.txt here)
#      CONFORMANCE_TIMEOUT (each phase's ginkgo --timeout; default 4h: specs past it are
#      reported as interrupted, and the run fails)
#      CONFORMANCE_SLO_ROUNDS (default 2: each round measures ours and upstream once, the
#      first of the pair alternating, so neither always comes first)
#
# Images: the specs' images are pulled by their public names (registry.k8s.io/e2e-test-images/…)
# from the offline stand-ins of test/e2e-node/images.sh, served on the nodes' bridge
# (run.sh's CLUSTER_REGISTRY_DATA). `make e2e-node` or `make e2e-node-fast` fills that registry
# (/var/cache/cri-dockerd-ci/e2e-node/registry); this script says so when it is empty.
#
# test/lib/expected-failures.py compares the failures with the expected-failures list; the run
# exits non-zero on any failure not listed there.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=conformance
# log lines carry the time of day.
LOG_STAMP=clock
CACHE=${E2E_CACHE:-/var/cache/cri-dockerd-ci}
PROCS=${CONFORMANCE_PROCS:-4}
TIMEOUT=${CONFORMANCE_TIMEOUT:-4h}
EXPECTED=${CONFORMANCE_EXPECTED:-$HERE/conformance-expected-failures.txt}
PARALLEL_FOCUS=${CONFORMANCE_FOCUS:-'\[Conformance\]'}
PARALLEL_SKIP='\[Serial\]|\[Disruptive\]|\[Flaky\]'
SERIAL_FOCUS='\[Serial\].*\[Conformance\]|\[Conformance\].*\[Serial\]'
SERIAL_SKIP='\[Disruptive\]|\[Flaky\]'

parallel=1 serial=1 slo=1 deb=
for a in "$@"; do
  case $a in
  --parallel-only) serial=0 ;;
  --serial-only) parallel=0 ;;
  --slo-only) parallel=0 serial=0 ;;
  --no-slo) slo=0 ;;
  -*) echo "usage: $0 [--parallel-only | --serial-only | --slo-only] [--no-slo] DEB" >&2; exit 2 ;;
  *) deb=$a ;;
  esac
done
[[ -n ${CONFORMANCE_FOCUS:-} ]] && serial=0

[[ -f $deb ]] || die "usage: $0 [--parallel-only | --serial-only | --slo-only] [--no-slo] DEB (make release builds dist/cri-dockerd_*_amd64.deb)"
REGISTRY_DATA=$CACHE/e2e-node/registry/data
[[ -f $CACHE/e2e-node/registry/pushed && -d $REGISTRY_DATA/docker ]] ||
  die "no stand-in images in $CACHE/e2e-node/registry: run 'make e2e-node-fast' once (it builds and pushes them)"
OUT=${CONFORMANCE_OUT:-$(mktemp -d /tmp/cri-dockerd-conformance.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log "logs and reports in $OUT"
t_start=$SECONDS

E2E=$("$HERE/conformance-build.sh" | tail -n 1)
K8S=$("$ROOT/test/e2e/build-k8s.sh" | tail -n 1)
((slo)) && UPSTREAM_BIN=$("$ROOT/hack/upstream.sh" | tail -n 1)

# The cluster lock for the whole run: run.sh --keep returns with the cluster up, and no other
# cluster run may take it down under the suite.
mkdir -p "$CACHE"
exec 9>"$CACHE/cluster.lock"
flock -w 1800 9 || die "another cluster run holds $CACHE/cluster.lock"
export CLUSTER_LOCK_HELD=1

CLUSTER_DOCKER="docker -H unix:///run/cri-dockerd-cluster/docker.sock" # run.sh's dockerd of the nodes
suite_pid=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  stop_group "$suite_pid" "the suite" 30
  "$HERE/run.sh" --down >/dev/null 2>&1
  log "total $((SECONDS - t_start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
CLUSTER_OUT=$OUT/cluster CLUSTER_REGISTRY_DATA=$REGISTRY_DATA "$HERE/run.sh" --no-checks --keep "$deb" ||
  die "the cluster did not come up (logs in $OUT/cluster)"
KUBECONFIG_FILE=$OUT/cluster/admin.conf
log "cluster up in $((SECONDS - t0)) s"
# The aggregator spec's image, which the stand-in registry does not hold: sample-apiserver
# (conformance-build.sh, static) alone in an image, as upstream's ENTRYPOINT runs it, imported
# under its public name on every node.
mkdir -p "$OUT/sample-apiserver/root/tmp"
install -m 0755 "$E2E/sample-apiserver" "$OUT/sample-apiserver/root/sample-apiserver"
tar --numeric-owner -C "$OUT/sample-apiserver/root" -cf "$OUT/sample-apiserver/image.tar" .
for n in $($CLUSTER_DOCKER ps --format '{{.Names}}'); do
  $CLUSTER_DOCKER exec -i "$n" docker import -c 'ENTRYPOINT ["/sample-apiserver"]' - \
    registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2 <"$OUT/sample-apiserver/image.tar" >/dev/null ||
    die "$n: import of the sample-apiserver image"
done
rm -rf "$OUT/sample-apiserver"
mapfile -t workers < <("$K8S/kubectl" --kubeconfig "$KUBECONFIG_FILE" get nodes -l '!node-role.kubernetes.io/control-plane' -o name | sed 's|^node/||')

# run_phase NAME PROCS FOCUS SKIP: one ginkgo run of e2e.test; its JUnit report is
# $OUT/junit-NAME.xml.
reports=()
run_phase() {
  local name=$1 procs=$2 focus=$3 skip=$4 rc=0 t=$SECONDS
  mkdir -p "$OUT/$name"
  log "phase $name: $procs worker(s), focus '$focus', skip '$skip' (log: $OUT/$name/ginkgo.log)"
  (
    cd "$OUT/$name"
    exec setsid "$E2E/ginkgo" run --procs="$procs" --no-color --timeout="$TIMEOUT" --poll-progress-after=10m \
      --focus="$focus" --skip="$skip" --junit-report="$OUT/junit-$name.xml" \
      "$E2E/e2e.test" -- --kubeconfig "$KUBECONFIG_FILE" --kubectl-path "$K8S/kubectl" \
      --provider skeleton --report-dir "$OUT/$name" --disable-log-dump
  ) >"$OUT/$name/ginkgo.log" 2>&1 &
  suite_pid=$!
  wait "$suite_pid" || rc=$?
  suite_pid=
  grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!|PASS|FAIL)' "$OUT/$name/ginkgo.log" | sed 's/^/  /' >&2 || true
  log "phase $name: exit $rc in $((SECONDS - t)) s"
  reports+=("$OUT/junit-$name.xml")
}

((parallel)) && run_phase parallel "$PROCS" "$PARALLEL_FOCUS" "$PARALLEL_SKIP"
((serial)) && run_phase serial 1 "$SERIAL_FOCUS" "$SERIAL_SKIP"
rc=0
if ((${#reports[@]})); then
  partial=()
  ((parallel && serial)) || partial=(--partial)
  python3 "$ROOT/test/lib/expected-failures.py" --name conformance "${partial[@]}" "$EXPECTED" "${reports[@]}" |
    tee "$OUT/report.txt" || rc=$?
fi

# use_cri_dockerd ours|upstream: every worker's cri-dockerd becomes that binary (renamed into
# place, as a package upgrade does) and is restarted with its pods running (docs/migration.md);
# then waits for the nodes Ready and a few of the kubelet's relists through it.
use_cri_dockerd() {
  local n
  for n in "${workers[@]}"; do
    $CLUSTER_DOCKER exec "$n" sh -c "cp /usr/bin/cri-dockerd.$1 /usr/bin/cri-dockerd.new &&
      mv -f /usr/bin/cri-dockerd.new /usr/bin/cri-dockerd && systemctl restart cri-docker.service" ||
      die "$n: restart on $1's cri-dockerd"
    log "$n: $($CLUSTER_DOCKER exec "$n" cri-dockerd --version 2>&1 | head -1)"
  done
  for n in "${workers[@]}"; do
    "$K8S/kubectl" --kubeconfig "$KUBECONFIG_FILE" wait --for=condition=Ready "node/$n" --timeout=120s >/dev/null ||
      die "$n not Ready on $1's cri-dockerd"
  done
  sleep 10
}

if ((slo)); then
  for n in "${workers[@]}"; do
    $CLUSTER_DOCKER exec "$n" cp /usr/bin/cri-dockerd /usr/bin/cri-dockerd.ours || die "$n: keep our binary"
    $CLUSTER_DOCKER cp "$UPSTREAM_BIN" "$n:/usr/bin/cri-dockerd.upstream" || die "$n: copy in upstream's binary"
  done
  : >"$OUT/slo.txt"
  for r in $(seq "${CONFORMANCE_SLO_ROUNDS:-2}"); do
    order=(ours upstream)
    ((r % 2)) || order=(upstream ours)
    for which in "${order[@]}"; do
      use_cri_dockerd "$which"
      python3 "$HERE/startup-slo.py" --label "$which $r" "$K8S/kubectl" "$KUBECONFIG_FILE" "${workers[@]}" |
        tee -a "$OUT/slo.txt" || { log "the startup SLO run on $which did not finish"; rc=1; }
    done
  done
  # The ratio of the medians over the rounds, per percentile (ours / upstream: below 1 is faster).
  python3 - "$OUT/slo.txt" <<'PY' | tee -a "$OUT/slo.txt"
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"slo (\w+) \d+: creation to Running \(watch\): p50 ([\d.]+) s, p90 ([\d.]+) s, p99 ([\d.]+) s", line)
    if m:
        runs.setdefault(m[1], []).append([float(x) for x in m.groups()[1:]])
if set(runs) == {"ours", "upstream"}:
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in runs.items()}
    print("slo ratio ours/upstream (median of %d and %d runs): p50 %.2f, p90 %.2f, p99 %.2f" % (
        len(runs["ours"]), len(runs["upstream"]), *(o / u for o, u in zip(med["ours"], med["upstream"]))))
PY
fi
exit "$rc"
