#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Runs the CRI validation suite (critest, cri-tools v1.37.0) offline against a cri-dockerd binary.
#
# Usage: run.sh [--benchmark] BINARY [CRITEST_ARGS...]
#   --benchmark   run critest's benchmarks instead of the validation specs
#                 (CRITEST_BENCH_SAMPLES samples per benchmark, default 100)
#   CRITEST_ARGS  passed to critest, e.g. -ginkgo.focus='Image Manager'
# Env: CRITEST_OUT  output dir (default: a new /tmp/cri-dockerd-critest.XXXXXX)
#      CRITEST_TIMEOUT  suite timeout (default 45m)
#      CRITEST_VERBOSE=1  stream critest's output (it is always kept in the output dir)
#      CRITEST_DOCKER_ENDPOINT  the Docker engine under test, passed as --docker-endpoint
#                    (default: cri-dockerd's, unix:///var/run/docker.sock, the 20.10 engine of
#                    hack/docker.sh); the setup scripts always prepare that engine,
#                    which builds and pushes the registry's images
#      CRITEST_EXPECTED  the expected-failures file (default expected-failures.txt, for 20.10;
#                    expected-failures-docker29.txt is Docker 29's, expected-failures-gvisor.txt
#                    gVisor's on 20.10)
#      CRITEST_RUNTIME_HANDLER  the RuntimeClass handler of every pod, passed as critest's
#                    -runtime-handler (default: none, Docker's default runtime); e.g. gvisor, the
#                    runsc --network=host runtime of hack/docker.sh. The Docker
#                    runtime of that name must exist: checked before the run
#      CRITEST_NETWORK_PLUGIN  cri-dockerd's --network-plugin: cni (default: the bridge network
#                    below) or "" (Docker's bridge). gVisor needs runsc --network=host (or none)
#                    for either: it then uses the interfaces of the pod's network namespace
#
# Compares the failed specs with the expected failures; exits non-zero on any unexpected failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

benchmark=0
if [[ ${1:-} == --benchmark ]]; then benchmark=1; shift; fi
[[ $# -ge 1 && -n $1 ]] || { echo "usage: $0 [--benchmark] BINARY [CRITEST_ARGS...]" >&2; exit 2; }
BINARY=$1
shift
[[ -x $BINARY ]] || { echo "run.sh: $BINARY is not an executable" >&2; exit 2; }
BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")
EXPECTED=${CRITEST_EXPECTED:-$HERE/expected-failures.txt}
[[ -f $EXPECTED ]] || { echo "run.sh: no expected-failures file $EXPECTED" >&2; exit 2; }
docker_args=()
[[ -n ${CRITEST_DOCKER_ENDPOINT:-} ]] && docker_args=(--docker-endpoint "$CRITEST_DOCKER_ENDPOINT")
HANDLER=${CRITEST_RUNTIME_HANDLER:-}
NETWORK_PLUGIN=${CRITEST_NETWORK_PLUGIN-cni}
case $NETWORK_PLUGIN in cni | "") ;; *) echo "run.sh: CRITEST_NETWORK_PLUGIN must be cni or empty, not $NETWORK_PLUGIN" >&2; exit 2 ;; esac

# shellcheck source=../lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=critest/run.sh

# One run at a time on a machine: each removes the critest pods it finds on the shared dockerd.
mkdir -p /var/cache/cri-dockerd-ci
exec 9>/var/cache/cri-dockerd-ci/critest.lock
flock -w 3600 9 || { log "another critest run holds /var/cache/cri-dockerd-ci/critest.lock"; exit 1; }

# The offline registry (registry.sh, 127.0.0.1:443) serves this run only: it is stopped when the
# run ends, pass, fail or interrupt, so nothing is left on the port. Its data stays in the
# cache, so the next run's start serves every image again in about a second.
registry_started=0
stop_registry() {
  ((registry_started)) || return 0
  registry_started=0
  "$HERE/registry.sh" stop || log "could not stop the registry (pid in /var/cache/cri-dockerd-ci/registry/registry.pid)"
}
trap stop_registry EXIT
trap 'exit 130' INT TERM

# --- setup ------------------------------------------------------------------------------------
for s in docker.sh images.sh; do
  if [[ -x $ROOT/hack/$s ]]; then "$ROOT/hack/$s" >/dev/null; fi
done
if [[ -n $HANDLER ]]; then
  # A handler that is no Docker runtime would fail every spec with the same error: say it once.
  engine=${CRITEST_DOCKER_ENDPOINT:-unix:///var/run/docker.sock}
  runtimes=$(curl -sf --unix-socket "${engine#unix://}" http://docker/info | jq -r '.Runtimes | keys[]') ||
    { log "cannot ask $engine for its runtimes"; exit 1; }
  grep -qxF -- "$HANDLER" <<<"$runtimes" ||
    { log "Docker at $engine has no runtime \"$HANDLER\" (it has: $(paste -sd' ' <<<"$runtimes")); see hack/docker.sh"; exit 1; }
fi
TOOLS=$("$HERE/build-tools.sh" | tail -n 1)
CRITEST=$TOOLS/critest
CRICTL=$TOOLS/crictl
registry_started=1 # also when it fails halfway: stop what it started
"$HERE/registry.sh"

OUT=${CRITEST_OUT:-$(mktemp -d /tmp/cri-dockerd-critest.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUN=$(mktemp -d /tmp/cri-dockerd-critest-run.XXXXXX) # short path: unix socket names are limited
trap 'rm -rf "$RUN"; stop_registry' EXIT
SOCK=$RUN/cri.sock
ENDPOINT=unix://$SOCK
DAEMON_LOG=$OUT/cri-dockerd.log
log "output dir: $OUT"

# A config file of our own: no warning about a missing /etc/crictl.yaml, and no other settings.
printf 'runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n' "$ENDPOINT" "$ENDPOINT" >"$RUN/crictl.yaml"
crictl() { "$CRICTL" --config "$RUN/crictl.yaml" "$@"; }

remove_test_pods() {
  local pods
  pods=$(crictl pods --namespace cri-test-namespace -q 2>/dev/null) || { log "cannot list pods"; return 0; }
  [[ -n $pods ]] || return 0
  log "removing $(wc -w <<<"$pods") leftover critest pod(s)"
  # shellcheck disable=SC2086
  crictl rmp -f $pods >/dev/null 2>&1 || log "could not remove every leftover pod"
}

daemon_pid=
stop_daemon() {
  stop_pid "$daemon_pid" cri-dockerd 10
  daemon_pid=
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then remove_test_pods; fi
  stop_daemon
  rm -rf "$RUN"
  stop_registry
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the daemon ---------------------------------------------------------------------------------
# Pods get CNI networking (the default, as upstream) from the shipped sample config, on a bridge
# and subnet of critest's own; the plugins are Debian's (/usr/lib/cni, in the default
# --cni-bin-dir).
mkdir -p "$RUN/net.d"
jq '.name = "crid-critest" | .plugins[0].bridge = "crid-ct0" | .plugins[0].ipam.ranges = [[{subnet: "10.97.0.0/16"}]]' \
  "$ROOT/packaging/cni/10-cri-dockerd-bridge.conflist" >"$RUN/net.d/10-critest.conflist"
net_args=(--network-plugin=)
[[ $NETWORK_PLUGIN == cni ]] && net_args=(--network-plugin=cni --cni-conf-dir "$RUN/net.d")
log "starting $BINARY on $ENDPOINT (log: $DAEMON_LOG)"
# NRI on a socket of this run's own (critest's NRI specs connect their plugin there); no plugins
# to start. The plugin synchronization specs hold a plugin's Synchronize open for 2 s to race a
# create against it: longer than NRI's default request timeout (2 s, containerd's too), which
# would drop the plugin and make the specs skip. 10 s lets them test the race.
"$BINARY" --container-runtime-endpoint "$ENDPOINT" --cri-dockerd-root-directory "$RUN/root" \
  --nri-socket "$RUN/nri.sock" --nri-plugin-path "$RUN/nri-plugins" --nri-plugin-request-timeout 10s \
  "${net_args[@]}" "${docker_args[@]}" --log-level info >"$DAEMON_LOG" 2>&1 &
daemon_pid=$!
# serving_or_gone: it serves, or it exited (no use waiting longer).
# shellcheck disable=SC2317 # run by wait_for
serving_or_gone() {
  { [[ -S $SOCK ]] && crictl version >/dev/null 2>&1; } || ! kill -0 "$daemon_pid" 2>/dev/null
}
wait_for 30 "cri-dockerd to serve $ENDPOINT" serving_or_gone || true
if ! kill -0 "$daemon_pid" 2>/dev/null || ! crictl version >/dev/null 2>&1; then
  log "cri-dockerd did not serve $ENDPOINT; its log:"
  tail -30 "$DAEMON_LOG" >&2
  exit 1
fi
crictl version | sed 's/^/  /' >&2
remove_test_pods

# --- critest -------------------------------------------------------------------------------------
JUNIT=$OUT/junit.xml
CRITEST_LOG=$OUT/critest.log
rm -f "$JUNIT" # never read a report of an earlier run
args=(
  -config "$RUN/crictl.yaml" -runtime-endpoint "$ENDPOINT" -image-endpoint "$ENDPOINT"
  # No -parallel: its default is 1, and passing it makes ginkgo refuse to run ("Use of go test
  # -parallel"). Specs run serially.
  "-ginkgo.junit-report=$JUNIT" -nri-socket "$RUN/nri.sock"
  "-ginkgo.timeout=${CRITEST_TIMEOUT:-45m}"
  -ginkgo.no-color
)
[[ -n $HANDLER ]] && args+=(-runtime-handler "$HANDLER")
if ((benchmark)); then
  n=${CRITEST_BENCH_SAMPLES:-100}
  cat >"$OUT/benchmark-params.yaml" <<EOF
containersNumber: $n
containersNumberParallel: 1
podsNumber: $n
podsNumberParallel: 1
imagesNumber: $n
imagesNumberParallel: 1
EOF
  mkdir -p "$OUT/benchmark"
  args+=(-benchmark -benchmarking-params-file "$OUT/benchmark-params.yaml" -benchmarking-output-dir "$OUT/benchmark")
fi
args+=("$@")

log "running critest$( ((benchmark)) && echo ' -benchmark')${HANDLER:+ -runtime-handler $HANDLER} (network plugin: ${NETWORK_PLUGIN:-none (the Docker bridge)}; log: $CRITEST_LOG)"
start=$SECONDS
set +e
if [[ ${CRITEST_VERBOSE:-0} == 1 ]]; then
  (cd "$OUT" && "$CRITEST" "${args[@]}") 2>&1 | tee "$CRITEST_LOG"
  rc=${PIPESTATUS[0]}
else
  (cd "$OUT" && "$CRITEST" "${args[@]}") >"$CRITEST_LOG" 2>&1
  rc=$?
fi
set -e
log "critest exited with status $rc after $((SECONDS - start)) s"

remove_test_pods
stop_daemon
stop_registry

# --- report --------------------------------------------------------------------------------------
if [[ ! -s $JUNIT ]]; then
  log "critest wrote no junit report; the end of its log:"
  tail -40 "$CRITEST_LOG" >&2
  exit 1
fi
set +e
report_args=()
# A benchmark or focused run does not run every listed spec: do not list those lines.
if ((benchmark)) || (($# > 0)); then report_args+=(--partial); fi
if ((benchmark)); then report_args+=(--benchmark-dir "$OUT/benchmark"); fi
python3 "$ROOT/test/lib/expected-failures.py" "${report_args[@]}" "$EXPECTED" "$JUNIT"
status=$?
set -e
echo "critest: output in $OUT (junit.xml, critest.log, cri-dockerd.log)"
if ((status != 0)); then
  if ((status == 1)); then log "unexpected failures (see above)"; else log "could not evaluate the report"; fi
  exit 1
fi
if ((rc != 0)); then log "critest failed, but every failure is listed in $(basename "$EXPECTED")"; fi
exit 0
