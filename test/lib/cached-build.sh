# shellcheck shell=bash
# Sourced by the scripts that build tools into the cache outside the checkout
# (test/e2e/build-k8s.sh, test/e2e-node/build.sh, test/cluster/build.sh,
# test/cluster/conformance-build.sh, test/critest/build-tools.sh).
#
# cached_build_start LOCK SECONDS CMD...: the start they share. The caller sources common.sh (log) and defines BIN and
# have_all (true when every binary is in $BIN). When they are all there, it prints $BIN and
# exits the script. Else it checks that each CMD is in PATH and takes LOCK on fd 8: one build at
# a time on a machine, a second caller waits up to SECONDS. Should the build that held the lock
# have made the binaries, it prints $BIN and exits; otherwise it returns, holding the lock, and
# the caller builds.
cached_build_start() {
  local lock=$1 wait=$2 cmd
  shift 2
  if have_all; then
    echo "$BIN"
    exit 0
  fi
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null || { log "$cmd not found in PATH (needed to build $BIN)"; exit 1; }
  done
  mkdir -p "$BIN" "$(dirname "$lock")"
  exec 8>"$lock"
  flock -w "$wait" 8 || { log "another build holds $lock"; exit 1; }
  if have_all; then
    echo "$BIN"
    exit 0
  fi
}
