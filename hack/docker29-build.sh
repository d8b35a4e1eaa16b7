#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds a current Docker Engine from the Go module proxy into a cache outside the checkout:
# dockerd and docker-proxy 29.8.0 (github.com/moby/moby/v2 v2.0.0-beta.24), containerd and its
# runc shim v2.3.5 (the version moby pins) and runc v1.5.1. docker29.sh runs them.
#
# Usage: docker29-build.sh   -> prints the bin dir on stdout (last line)
# Env:   DOCKER29_CACHE  (default /var/cache/cri-dockerd-ci/docker29)
#
# The bin dir is keyed by the versions (CACHE/dockerd-29.8.0_containerd-v2.3.5_runc-v1.5.1/bin)
# and appears whole or not at all: a second run returns at once. A lock keeps two callers from
# building at the same time (the second waits, then finds the result). Cold: about 8 minutes on
# 2 cores, under nice.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../test/lib/common.sh
. "$HERE/../test/lib/common.sh"
LOG_PREFIX=docker29-build
# MOBY_VERSION, DOCKERD_VERSION (what that moby/v2 is released as), CONTAINERD_VERSION, RUNC_VERSION
# shellcheck source=../test/versions.sh
. "$HERE/../test/versions.sh"

MOBY_MODULE=github.com/moby/moby/v2
CACHE=${DOCKER29_CACHE:-/var/cache/cri-dockerd-ci/docker29}
KEY=dockerd-${DOCKERD_VERSION}_containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}
BIN=$CACHE/$KEY/bin
BINARIES=(dockerd docker-proxy containerd containerd-shim-runc-v2 runc)

complete() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
}
if complete; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE/$KEY"
exec 7>"$CACHE/$KEY.lock"
if ! flock -n 7; then
  log "another build of $KEY is running; waiting for it (up to 30 min)"
  flock -w 1800 7 || { log "the build lock $CACHE/$KEY.lock was not released"; exit 1; }
fi
if complete; then # built by the caller we waited for
  echo "$BIN"
  exit 0
fi

# 1. What the builds need: Go, a C toolchain (dockerd and containerd use cgo), libseccomp for
# runc's seccomp support.
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
command -v "$GO" >/dev/null || { log "go not found (PATH or /usr/local/go/bin)"; exit 1; }
need=()
command -v gcc >/dev/null || need+=(gcc)
dpkg-query -W -f='${Status}' libc6-dev 2>/dev/null | grep -q 'install ok installed' || need+=(libc6-dev)
dpkg-query -W -f='${Status}' libseccomp-dev 2>/dev/null | grep -q 'install ok installed' || need+=(libseccomp-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

# 2. go install PKG@VERSION into a fresh GOBIN; moved into place only once everything built.
tmp=$CACHE/$KEY/bin.tmp.$$
rm -rf "$CACHE/$KEY"/bin.tmp.*
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
export GOBIN=$tmp GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

# build NAME CGO TAGS LDFLAGS PKG@VERSION
build() {
  local name=$1 cgo=$2 tags=$3 ldflags=$4 pkg=$5 t0=$SECONDS
  log "building $name ($pkg)"
  CGO_ENABLED=$cgo nice -n 10 "$GO" install -trimpath -tags "$tags" -ldflags "$ldflags" "$pkg"
  [[ -x $tmp/$name ]] || { log "$pkg did not produce $name"; exit 1; }
  log "built $name in $((SECONDS - t0)) s"
}

start=$SECONDS
MOBY_TAGS='netgo osusergo nri_no_wasm exclude_graphdriver_btrfs exclude_graphdriver_zfs'
MOBY_LDFLAGS="-X $MOBY_MODULE/dockerversion.Version=$DOCKERD_VERSION"
build dockerd 1 "$MOBY_TAGS" "$MOBY_LDFLAGS" "$MOBY_MODULE/cmd/dockerd@$MOBY_VERSION"
build docker-proxy 1 "$MOBY_TAGS" "$MOBY_LDFLAGS" "$MOBY_MODULE/cmd/docker-proxy@$MOBY_VERSION"
build containerd 1 'urfave_cli_no_docs no_btrfs' \
  "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION"
build containerd-shim-runc-v2 0 'urfave_cli_no_docs no_grpc' \
  "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
build runc 1 'seccomp urfave_cli_no_docs' "-X main.version=${RUNC_VERSION#v}" \
  "github.com/opencontainers/runc@$RUNC_VERSION"

"$tmp/dockerd" --version >&2
"$tmp/containerd" --version >&2
# Not `| head -1`: runc writes its lines one by one and, under pipefail and set -e, its SIGPIPE
# once head has gone would fail the script after the whole build (and the trap would discard it).
"$tmp/runc" --version | sed -n 1p >&2
rm -rf "$BIN"
mv "$tmp" "$BIN"
log "built in $((SECONDS - start)) s into $BIN"
echo "$BIN"
