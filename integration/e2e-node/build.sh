#!/usr/bin/env bash
# Build Kubernetes' node e2e suite (k8s.io/kubernetes v1.37.2 test/e2e_node, a `go test -c` test
# binary), the ginkgo CLI that runs it in parallel, and the programs of the stand-in images
# (agnhost and nonewprivs from their sources in the same module, the pause container from
# build/pause/linux/pause.c), from the Go module proxy into a cache outside the checkout, keyed
# by version and by the build module's go.mod/go.sum: a second run finds them and returns.
#
# The build module is k8s-build/ (requires k8s.io/kubernetes and replaces every staging module
# with its published v0.37.2, as integration/e2e/k8s-build/kubernetes does for the kubelet).
# Built from a copy with -mod=readonly: the checked-in go.sum pins every dependency. Do not
# `go mod tidy` it: tidy keeps only what the module's own packages import, not the test imports
# of test/e2e_node; to change versions, edit go.mod and build once with GOFLAGS=-mod=mod.
#
# Usage: build.sh   -> prints the bin dir on stdout (last line): e2e_node.test, ginkgo, agnhost,
#                      nonewprivs, pause
# Env: E2E_CACHE (default /var/cache/cri-dockerd-ci)
# Cold build about 20 minutes on 2 busy cores (under nice); nothing to do when present.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_VERSION=v1.37.2
CACHE="${E2E_CACHE:-/var/cache/cri-dockerd-ci}"
key=$(cat "$HERE/k8s-build/go.mod" "$HERE/k8s-build/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
BIN="$CACHE/e2e-node/bin-kubernetes-$K8S_VERSION-$key"
BINARIES=(e2e_node.test ginkgo agnhost nonewprivs pause)

log() { echo "e2e-node build: $*" >&2; }

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
}

if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
command -v gcc >/dev/null || { log "gcc not found (apt-get install gcc libc6-dev)"; exit 1; }
mkdir -p "$BIN"
# One build at a time on a machine (a second caller waits, then finds the binaries).
exec 8>"$CACHE/e2e-node/build.lock"
flock -w 3600 8 || { log "another build holds $CACHE/e2e-node/build.lock"; exit 1; }
if have_all; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d "$CACHE/e2e-node/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# The module files are read-only inputs: build from a copy so a build never rewrites the checkout.
cp -r "$HERE/k8s-build" "$work/mod"
mkdir -p "$work/out"
gobuild() { (cd "$work/mod" && GOFLAGS=-mod=readonly nice -n 19 go "$@"); }

minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

if [[ ! -x $BIN/e2e_node.test ]]; then
  log "building test/e2e_node $K8S_VERSION (cold build about 20 minutes)"
  gobuild test -c -trimpath -ldflags "$ldflags" -o "$work/out/e2e_node.test" k8s.io/kubernetes/test/e2e_node
  mv "$work/out/e2e_node.test" "$BIN/"
fi
if [[ ! -x $BIN/ginkgo ]]; then
  log "building the ginkgo CLI"
  gobuild build -trimpath -ldflags "-s -w" -o "$work/out/" github.com/onsi/ginkgo/v2/ginkgo
  mv "$work/out/ginkgo" "$BIN/"
fi
# Static: they run in images that hold no libc of their own (agnhost's real base is Alpine).
if [[ ! -x $BIN/agnhost || ! -x $BIN/nonewprivs ]]; then
  log "building agnhost and nonewprivs (test/images)"
  CGO_ENABLED=0 gobuild build -trimpath -ldflags "-s -w" -o "$work/out/" \
    k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs
  mv "$work/out/agnhost" "$work/out/nonewprivs" "$BIN/"
fi
if [[ ! -x $BIN/pause ]]; then
  dir=$(cd "$work/mod" && GOFLAGS=-mod=readonly go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f $dir/build/pause/linux/pause.c ]] || { log "no build/pause/linux/pause.c in $dir"; exit 1; }
  log "building pause from $dir/build/pause/linux/pause.c"
  gcc -Os -Wall -static -s -DVERSION=v3.10.2 -o "$work/out/pause" "$dir/build/pause/linux/pause.c"
  mv "$work/out/pause" "$BIN/"
fi
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
