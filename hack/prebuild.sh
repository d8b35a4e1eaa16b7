#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Starts, in the background and under nice, the cached builds that the gate (`make test`) needs
# only later in its run: crictl and critest (test/critest/build-tools.sh), Docker 29
# (hack/docker29-build.sh) and the kubelet, kube-apiserver, kubectl and etcd
# (test/e2e/build-k8s.sh --gate). On a fresh machine they are about 30 minutes of a cold run;
# begun first, they build while the unit and integration tests run.
# Each build takes a lock: the step that needs it later waits for it to finish, then finds the
# binaries (or, should it have failed, builds them itself). With the caches full each build
# finds its binaries and returns at once. Should `make test` stop early, the builds go on to
# their end: they only fill the cache. The tiers' own builds (the node e2e suite, the cluster's
# binaries) are made by the tiers that need them.
#
# The Debian packages the builds need are installed first, in the foreground: an apt-get in the
# background would race the run's own for dpkg's lock.
#
# Usage: prebuild.sh   (log: $E2E_CACHE/prebuild.log, default /var/cache/cri-dockerd-ci)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${E2E_CACHE:-/var/cache/cri-dockerd-ci}
LOG=$CACHE/prebuild.log
BUILDS=("$ROOT/test/critest/build-tools.sh" "$HERE/docker29-build.sh" "$ROOT/test/e2e/build-k8s.sh --gate")

# shellcheck source=../test/lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=prebuild

mkdir -p "$CACHE"
need=()
for cmd in gcc make bzip2 pkg-config; do
  command -v "$cmd" >/dev/null || need+=("$cmd")
done
for pkg in libc6-dev libseccomp-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

# One after the other, in the order the run needs them; a failed one does not stop the next.
# setsid: the builds outlive this script and are in no job of make's.
# shellcheck disable=SC2016 # the inner script's own variables, expanded by bash -c
setsid nice -n 19 ionice -c 3 bash -c '
  for build in "$@"; do
    echo "== $(date -u +%T) $build"
    # each entry is "SCRIPT [ARGS]": split on purpose
    $build >/dev/null || echo "== $build failed; the step that needs it builds it again"
  done
  echo "== $(date -u +%T) done"' prebuild "${BUILDS[@]}" >"$LOG" 2>&1 </dev/null &
log "critest, Docker 29 and the kubelet: built in the background unless cached (log: $LOG)"
