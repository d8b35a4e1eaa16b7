#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Mutation testing (make mutation; not in `make test`): gremlins, built once into GREMLINS_DIR,
# makes one wrong change at a time to a package's code and runs that package's unit tests, which
# must fail. Prints, per package, killed / lived / not covered / timed out and the survivors'
# share (lived / (killed + lived)), then each survivor; the full reports are
# bin/mutation-PKG.log and bin/mutation-PKG.json. docs/mutation.md has the method and results.
#
# Env (the Makefile passes its defaults):
#   GO                     go command (go)
#   GREMLINS_VERSION       (test/versions.sh)
#   GREMLINS_DIR           /var/cache/cri-dockerd-ci/bin/gremlins-$GREMLINS_VERSION
#   MUTATION_PKGS          package directories, space separated
#   MUTATION_WORKERS       mutants at a time (1)
#   MUTATION_TIMEOUT_COEF  a mutant whose tests run longer than this many times the package's
#                          own test run is timed out (10)
#   MUTATION_EXCLUDE       gremlins -E file regexps, space separated (e.g. '^fake.*\.go$')
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GO=${GO:-go}
gremlins_env=${GREMLINS_VERSION:-}
# shellcheck source=../test/versions.sh
. "$ROOT/test/versions.sh"
GREMLINS_VERSION=${gremlins_env:-$GREMLINS_VERSION}
GREMLINS_DIR=${GREMLINS_DIR:-/var/cache/cri-dockerd-ci/bin/gremlins-$GREMLINS_VERSION}
MUTATION_PKGS=${MUTATION_PKGS:-internal/config internal/containerlog internal/network internal/libdocker internal/core}
MUTATION_WORKERS=${MUTATION_WORKERS:-1}
MUTATION_TIMEOUT_COEF=${MUTATION_TIMEOUT_COEF:-10}
read -r -a patterns <<<"${MUTATION_EXCLUDE:-}"
exclude=()
for e in "${patterns[@]}"; do exclude+=(-E "$e"); done

test -x "$GREMLINS_DIR/gremlins" || { mkdir -p "$GREMLINS_DIR" && (cd /tmp &&
  GOBIN=$GREMLINS_DIR GOFLAGS='' "$GO" install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"); }

mkdir -p bin
total=$(date +%s)
for p in $MUTATION_PKGS; do
  start=$(date +%s)
  name=${p##*/}
  log=bin/mutation-$name.log
  (cd "$p" && GOFLAGS=-count=1 "$GREMLINS_DIR/gremlins" unleash --workers "$MUTATION_WORKERS" \
    --timeout-coefficient "$MUTATION_TIMEOUT_COEF" "${exclude[@]}" \
    -o "$ROOT/bin/mutation-$name.json") >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
  k=$(grep -c '^ *KILLED ' "$log" || true)
  l=$(grep -c '^ *LIVED ' "$log" || true)
  n=$(grep -c '^ *NOT COVERED ' "$log" || true)
  t=$(grep -c '^ *TIMED OUT ' "$log" || true)
  echo "mutation ./$p/: killed $k, lived $l, not covered $n, timed out $t;" \
    "survivors $(awk -v k="$k" -v l="$l" 'BEGIN { printf "%.1f", k + l ? 100 * l / (k + l) : 0 }') % ($(($(date +%s) - start)) s)"
  grep '^ *LIVED ' "$log" | sed 's/^ */    /' || true
done
echo "mutation: $(($(date +%s) - total)) s"
