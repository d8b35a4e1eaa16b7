#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build Kubernetes' node e2e suite (k8s.io/kubernetes v1.37.2 test/e2e_node, a `go test -c` test
# binary), the ginkgo CLI that runs it in parallel, and the programs of the stand-in images
# (agnhost and nonewprivs from their sources in the same module, the pause container from
# build/pause/linux/pause.c), from the Go module proxy into a cache outside the checkout, keyed
# by version and by the build module's go.mod/go.sum: a second run finds them and returns. Also
# busybox 1.35.0 as upstream builds it (defconfig, dynamically linked), from the upstream tarball
# of Debian's source package (apt-get source, with an apt configuration of its own): Debian's
# binary package reverts upstream's ash change that passes environment variables with names
# such as "data-1" on to children (specs of EnvFrom check them) and leaves out applets the specs
# run (nmeter). And Debian's netcat-openbsd, the nc of agnhost's Alpine base (the networking specs
# run `nc -w 1 -u`).
#
# The build module is k8s-build/ (requires k8s.io/kubernetes and replaces every staging module
# with its published v0.37.2, as test/e2e/k8s-build/kubernetes does for the kubelet).
# Built from a copy with -mod=readonly: the checked-in go.sum pins every dependency. Do not
# `go mod tidy` it: tidy keeps only what the module's own packages import, not the test imports
# of test/e2e_node; to change versions, edit go.mod and build once with GOFLAGS=-mod=mod.
#
# Usage: build.sh   -> prints the bin dir on stdout (last line): e2e_node.test, ginkgo, agnhost,
#                      nonewprivs, pause, busybox, nc.openbsd
# Env: E2E_CACHE (default /var/cache/cri-dockerd-ci)
# Cold build about 20 minutes on 2 busy cores (under nice); nothing to do when present.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX="e2e-node build"
# K8S_VERSION.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
CACHE="${E2E_CACHE:-/var/cache/cri-dockerd-ci}"
# Keyed by the pinned versions (go.mod/go.sum); remove the directory to rebuild after a change of
# this script. (So k8s-build/go.mod's comment still names integration/e2e-node/build.sh, the
# path before the move to test/: editing it would change the key and rebuild the suite.)
key=$(cat "$HERE/k8s-build/go.mod" "$HERE/k8s-build/go.sum" | sha256sum | cut -c1-12)
BIN="$CACHE/e2e-node/bin-kubernetes-$K8S_VERSION-$key"
BINARIES=(e2e_node.test ginkgo agnhost nonewprivs pause busybox nc.openbsd)
BUSYBOX_ORIG=busybox_1.35.0.orig.tar.bz2

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
}

# shellcheck source=../lib/cached-build.sh
. "$HERE/../lib/cached-build.sh"
# gcc (Debian's gcc and libc6-dev), make and bzip2: busybox and pause.
cached_build_start "$CACHE/e2e-node/build.lock" 3600 go gcc make bzip2

work="$(mktemp -d "$CACHE/e2e-node/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# The module files are read-only inputs: build from a copy so a build never rewrites the checkout.
cp -r "$HERE/k8s-build" "$work/mod"
mkdir -p "$work/out"
gobuild() { (cd "$work/mod" && GOFLAGS=-mod=readonly nice -n 19 go "$@"); }

# shellcheck source=../e2e/k8s-ldflags.sh
. "$HERE/../e2e/k8s-ldflags.sh"
ldflags=$(k8s_version_ldflags "$K8S_VERSION")

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
if [[ ! -x $BIN/busybox ]]; then
  src=$CACHE/e2e-node/src
  mkdir -p "$src"
  if [[ ! -s $src/$BUSYBOX_ORIG ]]; then
    log "fetching Debian's busybox source package (bookworm)"
    apt=$work/apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources" "$apt/dl"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      >"$apt/sources/bookworm-src.sources"
    aptopts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/sources" -o "Dir::State::Lists=$apt/lists"
      -o "Dir::Cache=$apt/cache" -o Acquire::Languages=none)
    apt-get -q "${aptopts[@]}" update >&2
    chown _apt "$apt/dl" 2>/dev/null || true
    (cd "$apt/dl" && apt-get -q "${aptopts[@]}" source --download-only busybox >&2)
    [[ -s $apt/dl/$BUSYBOX_ORIG ]] || { log "no $BUSYBOX_ORIG in Debian's busybox source package"; exit 1; }
    mv "$apt/dl/$BUSYBOX_ORIG" "$src/"
  fi
  log "building busybox 1.35.0 (upstream defconfig)"
  mkdir -p "$work/busybox"
  tar -C "$work/busybox" -xjf "$src/$BUSYBOX_ORIG"
  (cd "$work/busybox/busybox-1.35.0" && nice -n 19 make defconfig >/dev/null && nice -n 19 make -j2 busybox >"$work/busybox.log" 2>&1) ||
    { tail -20 "$work/busybox.log" >&2; log "busybox build failed"; exit 1; }
  install -m 0755 "$work/busybox/busybox-1.35.0/busybox" "$BIN/busybox"
fi
if [[ ! -x $BIN/nc.openbsd ]]; then
  mkdir -p "$work/nc"
  chown _apt "$work/nc" 2>/dev/null || true
  (cd "$work/nc" && { apt-get download -q netcat-openbsd >&2 || { apt-get update -q >&2 && apt-get download -q netcat-openbsd >&2; }; })
  dpkg-deb -x "$work"/nc/netcat-openbsd_*.deb "$work/nc/x"
  install -m 0755 "$work/nc/x/bin/nc.openbsd" "$BIN/nc.openbsd"
fi
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
