#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds Kubernetes' e2e suite (k8s.io/kubernetes v1.37.2 test/e2e, a `go test -c` binary:
# e2e.test, whose [Conformance] specs judge a cluster), the ginkgo CLI that runs it in parallel
# and k8s.io/sample-apiserver v0.37.2 (the program of the aggregator spec's image, which
# upstream builds from that module too), from the Go module proxy, into a cache outside the
# checkout keyed by the build module (build/conformance/go.mod and go.sum): a second run finds
# them and returns.
#
# The build module requires k8s.io/kubernetes and replaces every staging module with its
# published v0.37.2, as test/e2e-node/k8s-build does. Built from a copy with -mod=readonly: the
# checked-in go.sum pins every dependency (do not `go mod tidy` it; to change versions, edit
# go.mod and build once with GOFLAGS=-mod=mod).
#
# Usage: conformance-build.sh   -> prints the bin dir on stdout (last line): e2e.test, ginkgo,
#                                 sample-apiserver
# Env: E2E_CACHE (default /var/cache/cri-dockerd-ci)
# Cold build about 15-25 minutes on 2 cores (under nice); nothing to do when present.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX="conformance build"
# K8S_VERSION.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
CACHE="${E2E_CACHE:-/var/cache/cri-dockerd-ci}"
MOD=$HERE/build/conformance
key=$(cat "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)
BIN="$CACHE/conformance/bin-kubernetes-$K8S_VERSION-$key"

have_all() { [[ -x $BIN/e2e.test && -x $BIN/ginkgo && -x $BIN/sample-apiserver ]]; }

# shellcheck source=../lib/cached-build.sh
. "$HERE/../lib/cached-build.sh"
cached_build_start "$CACHE/conformance/build.lock" 3600 go

work="$(mktemp -d "$CACHE/conformance/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
cp -r "$MOD" "$work/mod"
mkdir -p "$work/out"
gobuild() { (cd "$work/mod" && GOFLAGS=-mod=readonly nice -n 19 go "$@"); }

# shellcheck source=../e2e/k8s-ldflags.sh
. "$HERE/../e2e/k8s-ldflags.sh"
ldflags=$(k8s_version_ldflags "$K8S_VERSION")
if [[ ! -x $BIN/e2e.test ]]; then
  log "building test/e2e $K8S_VERSION (cold build about 20 minutes)"
  gobuild test -c -trimpath -ldflags "$ldflags" -o "$work/out/e2e.test" k8s.io/kubernetes/test/e2e
  mv "$work/out/e2e.test" "$BIN/"
fi
if [[ ! -x $BIN/ginkgo ]]; then
  log "building the ginkgo CLI"
  gobuild build -trimpath -ldflags "-s -w" -o "$work/out/" github.com/onsi/ginkgo/v2/ginkgo
  mv "$work/out/ginkgo" "$BIN/"
fi
if [[ ! -x $BIN/sample-apiserver ]]; then
  log "building k8s.io/sample-apiserver"
  # Static: its stand-in image holds no libc.
  CGO_ENABLED=0 gobuild build -trimpath -ldflags "-s -w" -o "$work/out/" k8s.io/sample-apiserver
  mv "$work/out/sample-apiserver" "$BIN/"
fi
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
