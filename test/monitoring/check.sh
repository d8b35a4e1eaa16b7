#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Checks packaging/monitoring (`make monitoring-test`): the Grafana dashboard and the Prometheus
# alert rules for cri-dockerd's own /metrics.
#
# Usage: check.sh [BINARY]   (default bin/cri-dockerd; `make monitoring-test` builds it)
# Env: MONITORING_SCRAPE_OUT=FILE keeps a copy of the scrape (for check.py names by hand).
#
#  1. promtool check rules on the alert rules; every dashboard expression (Grafana's variables
#     replaced by concrete values) parsed by promtool as a recording rule; the dashboard's
#     structure (check.py prepare); promtool's unit tests of the alerts (alerts-test.yaml).
#  2. BINARY served on a temporary socket and root directory against the shared Docker
#     (unix:///var/run/docker.sock, Docker's bridge network), with --metrics-bind-addr on a free
#     loopback port. crictl makes the calls that bring every labelled series: a pod with a
#     container (pod starts, a log follower), exec (a streaming session), stats (a refresh),
#     a call that fails and an image Docker does not have (a Docker error). The pod is removed
#     at the end.
#  3. The scrape of /metrics: promtool check metrics, and every metric and label name of every
#     alert and dashboard expression checked against it, with the label values their matchers
#     select; every cri_dockerd_* family it has must be on the dashboard (check.py names).
#
# promtool comes from Debian's prometheus package: unpacked alone into the CI cache
# (/var/cache/cri-dockerd-ci/bin/prometheus-deb), not installed, so that no Prometheus service is
# set up or started. Needs root (apt-get) and a running Docker with the test images
# (hack/docker.sh, hack/images.sh: `make setup`).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/test/monitoring
BINARY=${1:-bin/cri-dockerd}
ALERTS=$ROOT/packaging/monitoring/cri-dockerd-alerts.yaml
DASHBOARD=$ROOT/packaging/monitoring/cri-dockerd-dashboard.json
CACHE=${CRI_DOCKERD_CI_CACHE:-/var/cache/cri-dockerd-ci}
DOCKER=/usr/bin/docker
PAUSE_IMAGE=registry.k8s.io/pause:3.10
TEST_IMAGE=cri-dockerd-test/busybox:latest
# The namespace of the test's pod: the cleanup removes what carries it, and nothing else.
NAMESPACE=crid-monitoring-test

# shellcheck source=../lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=monitoring-test
# log lines carry the seconds since the start.
LOG_STAMP=elapsed
fail() { log "FAIL: $*"; exit 1; }

[[ -x $BINARY ]] || fail "$BINARY is not an executable: run make build"
BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")

# --- tools --------------------------------------------------------------------------------------
apt_updated=0
apt_update() {
  ((apt_updated)) && return 0
  apt-get update -q >/dev/null
  apt_updated=1
}

python3 -c 'import yaml' 2>/dev/null || {
  log "installing python3-yaml"
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-yaml >/dev/null
}

PROMTOOL=$(command -v promtool || true)
if [[ -z $PROMTOOL ]]; then
  PROMTOOL=$CACHE/bin/prometheus-deb/usr/bin/promtool
  if [[ ! -x $PROMTOOL ]]; then
    log "unpacking promtool from Debian's prometheus package into $CACHE/bin/prometheus-deb"
    dl=$(mktemp -d)
    chmod 0755 "$dl" # apt's download user writes there
    (cd "$dl" && { apt-get download prometheus >"$dl/apt.log" 2>&1 ||
      { apt_update && apt-get download prometheus >"$dl/apt.log" 2>&1; }; }) ||
      { cat "$dl/apt.log" >&2; rm -rf "$dl"; fail "apt-get download prometheus"; }
    rm -rf "$CACHE/bin/prometheus-deb.tmp"
    mkdir -p "$CACHE/bin/prometheus-deb.tmp"
    dpkg-deb --fsys-tarfile "$dl"/prometheus_*.deb | tar -x -C "$CACHE/bin/prometheus-deb.tmp" ./usr/bin/promtool
    rm -rf "$dl" "$CACHE/bin/prometheus-deb"
    mv "$CACHE/bin/prometheus-deb.tmp" "$CACHE/bin/prometheus-deb"
  fi
fi
log "$("$PROMTOOL" --version 2>&1 | head -1)"

WORK=$(mktemp -d /tmp/crid-mon.XXXXXX) # short: unix socket paths are limited
SOCK=$WORK/cri.sock
TOOLS=
daemon_pid=
crictl() { "$TOOLS/crictl" --config "$WORK/crictl.yaml" "$@"; }
remove_pods() {
  local pods
  pods=$(crictl pods --namespace "$NAMESPACE" -q 2>/dev/null) || pods=
  # shellcheck disable=SC2086
  [[ -z $pods ]] || crictl rmp -f $pods >/dev/null 2>&1 || log "crictl rmp of the test pod failed"
}
# On every exit: the test's pod removed, cri-dockerd stopped, the temporary directory gone.
cleanup() {
  local rc=$?
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then remove_pods; fi
  stop_pid "$daemon_pid" cri-dockerd 10
  if [[ -n $daemon_pid ]]; then
    # Whatever the test's pod left, should cri-dockerd have died first: only our namespace's.
    local left
    left=$("$DOCKER" ps -aq --filter "label=io.kubernetes.pod.namespace=$NAMESPACE" 2>/dev/null) || left=
    # shellcheck disable=SC2086
    [[ -z $left ]] || { log "removing $(wc -w <<<"$left") container(s) the test left"; "$DOCKER" rm -f $left >/dev/null 2>&1 || true; }
    if ((rc != 0)) && [[ -f $WORK/cri-dockerd.log ]]; then
      log "cri-dockerd's log (last 20 lines):"
      tail -20 "$WORK/cri-dockerd.log" >&2
    fi
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the files on their own ------------------------------------------------------------------
log "promtool check rules $(basename "$ALERTS")"
"$PROMTOOL" check rules "$ALERTS" >"$WORK/check-rules.log" 2>&1 || { cat "$WORK/check-rules.log" >&2; fail "promtool check rules $ALERTS"; }
log "$(grep -o '[0-9]* rules found' "$WORK/check-rules.log")"
python3 "$HERE/check.py" prepare "$ALERTS" "$DASHBOARD" "$WORK"
"$PROMTOOL" check rules "$WORK/dashboard-rules.yaml" >"$WORK/check-dashboard.log" 2>&1 ||
  { cat "$WORK/check-dashboard.log" >&2; fail "a dashboard expression does not parse (each is a recording rule in the file above)"; }
log "every dashboard expression parses ($(grep -o '[0-9]* rules found' "$WORK/check-dashboard.log"))"
cp "$HERE/alerts-test.yaml" "$WORK/alerts-test.yaml"
"$PROMTOOL" test rules "$WORK/alerts-test.yaml" >"$WORK/test-rules.log" 2>&1 ||
  { cat "$WORK/test-rules.log" >&2; fail "promtool test rules test/monitoring/alerts-test.yaml"; }
log "promtool test rules: $(grep -c '^  - name:' "$HERE/alerts-test.yaml") alert tests pass"

# --- 2. a running cri-dockerd -------------------------------------------------------------------
"$DOCKER" version >/dev/null 2>&1 || { fail "Docker does not answer at unix:///var/run/docker.sock: run make setup"; }
for image in "$PAUSE_IMAGE" "$TEST_IMAGE"; do
  "$DOCKER" image inspect "$image" >/dev/null 2>&1 || { log "no $image: hack/images.sh"; "$ROOT/hack/images.sh" >/dev/null; }
done
TOOLS=$("$ROOT/test/critest/build-tools.sh" | tail -n 1)
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCK" "$SOCK" >"$WORK/crictl.yaml"

log "starting $BINARY on unix://$SOCK with --metrics-bind-addr 127.0.0.1:0"
"$BINARY" --container-runtime-endpoint "unix://$SOCK" --cri-dockerd-root-directory "$WORK/root" \
  --network-plugin= --metrics-bind-addr 127.0.0.1:0 --log-level info >"$WORK/cri-dockerd.log" 2>&1 &
daemon_pid=$!
metrics_addr=
# ready_or_gone: it logged its metrics address (kept in metrics_addr) and answers on SOCK, or it
# exited (no use waiting longer).
ready_or_gone() {
  kill -0 "$daemon_pid" 2>/dev/null || return 0
  metrics_addr=$(sed -n 's/.*msg="metrics listening".*address="\{0,1\}\([0-9.]*:[0-9]*\).*/\1/p' "$WORK/cri-dockerd.log" | head -1)
  [[ -n $metrics_addr && -S $SOCK ]] && crictl info >/dev/null 2>&1
}
wait_for 30 "cri-dockerd to serve on unix://$SOCK" ready_or_gone || true
kill -0 "$daemon_pid" 2>/dev/null || fail "cri-dockerd exited"
[[ -n $metrics_addr ]] || fail "cri-dockerd logged no metrics address"
crictl info >/dev/null 2>&1 || fail "cri-dockerd is not ready on unix://$SOCK within 30 s"
log "serving; metrics on http://$metrics_addr/metrics"
remove_pods

log "CRI calls: version, info, images, pods, a pod with a container, exec, stats, logs, errors"
crictl version >/dev/null
crictl images >/dev/null
crictl pods >/dev/null
crictl ps -a >/dev/null
# A call that fails (NotFound), and an image that Docker does not have (its inspect answers 404).
! crictl inspectp 0123456789abcdef0123456789abcdef >/dev/null 2>&1 || fail "inspectp of no pod succeeded"
crictl inspecti registry.invalid/crid-monitoring/none:0 >/dev/null 2>&1 || true
mkdir -p "$WORK/logs/pod"
cat >"$WORK/pod.json" <<EOF
{"metadata": {"name": "metrics", "namespace": "$NAMESPACE", "uid": "crid-monitoring-$$", "attempt": 0},
 "log_directory": "$WORK/logs/pod", "linux": {}}
EOF
cat >"$WORK/ctr.json" <<EOF
{"metadata": {"name": "app"}, "image": {"image": "$TEST_IMAGE"},
 "command": ["sh", "-c", "echo started; exec sleep 600"], "log_path": "app/0.log", "linux": {}}
EOF
# crictl warns of the pod's empty cgroup_parent (cri-dockerd picks Docker's): kept in a file.
pod=$(crictl runp "$WORK/pod.json" 2>"$WORK/crictl-runp.log") || { cat "$WORK/crictl-runp.log" >&2; fail "crictl runp"; }
ctr=$(crictl create "$pod" "$WORK/ctr.json" "$WORK/pod.json" 2>"$WORK/crictl-create.log") || { cat "$WORK/crictl-create.log" >&2; fail "crictl create"; }
crictl start "$ctr" >/dev/null || fail "crictl start"
[[ $(crictl exec "$ctr" echo exec-ok 2>&1) == exec-ok ]] || fail "crictl exec did not answer exec-ok"
crictl stats "$ctr" >/dev/null || fail "crictl stats"
logged_started() { crictl logs "$ctr" 2>/dev/null | grep -q started; }
wait_for 5 "'started' in the container's log" logged_started || fail "the container's log has no 'started'"

# --- 3. the scrape ------------------------------------------------------------------------------
curl -sf "http://$metrics_addr/metrics" >"$WORK/metrics.txt" || fail "scrape http://$metrics_addr/metrics"
[[ -z ${MONITORING_SCRAPE_OUT:-} ]] || cp "$WORK/metrics.txt" "$MONITORING_SCRAPE_OUT"
# The series the calls above must have made (a check of the check: a name it compares with).
for want in 'cri_dockerd_cri_request_errors_total{code="NotFound",method="PodSandboxStatus"}' \
  'cri_dockerd_docker_operation_errors_total{operation="GET /images/{name}/json"}' \
  'cri_dockerd_streaming_sessions{kind="exec"}' 'cri_dockerd_pod_sandboxes{runtime_handler=""} 1' \
  'cri_dockerd_log_followers 1' 'cri_dockerd_stats_refresh_duration_seconds_count'; do
  grep -qF "$want" "$WORK/metrics.txt" || fail "the scrape has no $want"
done
"$PROMTOOL" check metrics <"$WORK/metrics.txt" >"$WORK/lint.log" 2>&1 ||
  { cat "$WORK/lint.log" >&2; fail "promtool check metrics finds problems in /metrics"; }
log "promtool check metrics: the scrape ($(grep -c '^# TYPE' "$WORK/metrics.txt") families) is clean"
python3 "$HERE/check.py" names "$ALERTS" "$DASHBOARD" "$WORK/metrics.txt"

crictl stopp "$pod" >/dev/null
crictl rmp "$pod" >/dev/null
log "PASS"
