#!/usr/bin/env bash
# The kubelet density run of `make bench`: test/e2e/run.sh in its density mode
# (E2E_DENSITY), once with our binary and once with upstream's, each on a fresh private dockerd,
# kube-apiserver and kubelet v1.37.2; then the table of density.py --report.
#
# Usage: density-bench.sh OUR_BINARY UPSTREAM_BINARY
# Env:   DENSITY_COUNTS  batches, in order (default 10,100); the largest is also started straight
#                        through the CRI, without a kubelet, as the floor
#        DENSITY_OUT     where the figures go (default: a new /tmp/cri-dockerd-density.XXXXXX)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -eq 2 ]] || { echo "usage: $0 OUR_BINARY UPSTREAM_BINARY" >&2; exit 2; }
COUNTS=${DENSITY_COUNTS:-10,100}
OUT=${DENSITY_OUT:-$(mktemp -d /tmp/cri-dockerd-density.XXXXXX)}
for who in ours upstream; do
  bin=$1
  [[ $who == upstream ]] && bin=$2
  echo "== density: $who ($bin), batches $COUNTS"
  E2E_DENSITY=$COUNTS E2E_OUT=$OUT/$who "$HERE/run.sh" "$bin"
done
echo "== density: $OUT"
python3 "$HERE/density.py" --report "$OUT"
