#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build the cluster test's binaries that are not Kubernetes' own from the Go module proxy into a
# cache outside the checkout, keyed by version: etcd at the version kubeadm v1.37.2 pins
# (3.7.0), CoreDNS at kubeadm's (v1.14.6), flanneld v0.28.10 and the flannel CNI plugin. (kubeadm,
# kube-controller-manager, kube-scheduler and kube-proxy come from test/e2e/build-k8s.sh.)
# The build modules are build/*: modules of their own, with their go.sum.
#
# Usage: build.sh   -> prints the bin dir on stdout (last line)
# Env: E2E_CACHE (default /var/cache/cri-dockerd-ci)
# Cold build about 6 minutes on 2 cores (under nice); nothing to do when present.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=cluster/build
# CLUSTER_ETCD_VERSION, COREDNS_VERSION, FLANNEL_VERSION.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
CACHE="${E2E_CACHE:-/var/cache/cri-dockerd-ci}"
BIN="$CACHE/cluster-bin/etcd-$CLUSTER_ETCD_VERSION-coredns-$COREDNS_VERSION-flannel-$FLANNEL_VERSION"
# name in $BIN, build module, package
TARGETS=(
  "etcd etcd go.etcd.io/etcd/server/v3"
  "coredns coredns github.com/coredns/coredns"
  "flanneld flannel github.com/flannel-io/flannel"
  "flannel flannel-cni github.com/containernetworking/plugins/plugins/meta/flannel"
)

missing() {
  local t
  for t in "${TARGETS[@]}"; do
    [[ -x $BIN/${t%% *} ]] || echo "$t"
  done
}

have_all() { [[ -z $(missing) ]]; }

# shellcheck source=../lib/cached-build.sh
. "$HERE/../lib/cached-build.sh"
cached_build_start "$CACHE/cluster-bin/build.lock" 3600 go

work="$(mktemp -d "$CACHE/cluster-bin/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
while read -r name mod pkg; do
  log "building $name ($pkg)"
  # The module files are read-only inputs: build from a copy so a build never rewrites the checkout.
  [[ -d $work/$mod ]] || cp -r "$HERE/build/$mod" "$work/$mod"
  ldflags="-s -w"
  [[ $name == etcd ]] && ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=$CLUSTER_ETCD_VERSION"
  (cd "$work/$mod" && GOFLAGS=-mod=readonly nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$work/$name.out" "$pkg")
  mv "$work/$name.out" "$BIN/$name"
done < <(missing)
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
