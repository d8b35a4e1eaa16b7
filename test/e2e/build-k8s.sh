#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build kubelet, kube-apiserver, kubectl (Kubernetes v1.37.2) and etcd (v3.6.16) from the Go module
# proxy into a cache outside the checkout, keyed by version: a second run finds them and returns.
# kubeadm, kube-controller-manager, kube-scheduler and kube-proxy (the cluster test's,
# test/cluster/) are built with them: one `go build` shares the packages they have in common.
# The build modules are k8s-build/kubernetes and k8s-build/etcd (modules of their own, with their
# go.sum, so nothing touches the main go.mod).
#
# Usage: build-k8s.sh [--gate]  -> prints the bin dir on stdout (last line); it holds all eight
# binaries, or with --gate at least the four that the gate's kubelet e2e needs (kubelet,
# kube-apiserver, kubectl, etcd: a third less to build on a fresh machine).
# Env: E2E_CACHE (default /var/cache/cri-dockerd-ci)
# Cold build about 10 minutes on 2 cores (run under nice); nothing to do when present.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=build-k8s
# shellcheck source=k8s-ldflags.sh
. "$HERE/k8s-ldflags.sh"
# K8S_VERSION, ETCD_VERSION
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
CACHE="${E2E_CACHE:-/var/cache/cri-dockerd-ci}"
BIN="$CACHE/k8s-bin/kubernetes-$K8S_VERSION-etcd-$ETCD_VERSION"
K8S_BINARIES=(kubelet kube-apiserver kubectl kubeadm kube-controller-manager kube-scheduler kube-proxy)
[[ ${1:-} == --gate ]] && K8S_BINARIES=(kubelet kube-apiserver kubectl)
BINARIES=("${K8S_BINARIES[@]}" etcd)

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
}

# shellcheck source=../lib/cached-build.sh
. "$HERE/../lib/cached-build.sh"
cached_build_start "$CACHE/k8s-bin/build.lock" 3600 go

work="$(mktemp -d "$CACHE/k8s-bin/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# The module files are read-only inputs: build from copies so a build never rewrites the checkout.
build() { # MODULE_DIR LDFLAGS PACKAGE...
  local mod=$1 ldflags=$2
  shift 2
  cp -r "$HERE/k8s-build/$mod" "$work/$mod"
  (cd "$work/$mod" && GOFLAGS=-mod=readonly nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$work/out/" "$@")
}
mkdir -p "$work/out"

missing=()
for b in "${K8S_BINARIES[@]}"; do [[ -x $BIN/$b ]] || missing+=("$b"); done
if ((${#missing[@]})); then
  log "building ${missing[*]} $K8S_VERSION (cold build about 10 minutes, the cluster's binaries 5 more)"
  ldflags=$(k8s_version_ldflags "$K8S_VERSION")
  build kubernetes "$ldflags" "${missing[@]/#/k8s.io/kubernetes/cmd/}"
  for b in "${missing[@]}"; do mv "$work/out/$b" "$BIN/"; done
fi
if ! [[ -x $BIN/etcd ]]; then
  log "building etcd $ETCD_VERSION"
  build etcd "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" go.etcd.io/etcd/server/v3
  mv "$work/out/server" "$BIN/etcd" # go names the binary of .../server/v3 "server"
fi
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
