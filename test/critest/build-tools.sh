#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build crictl and critest (sigs.k8s.io/cri-tools) into a cache outside the checkout.
# Usage: build-tools.sh   -> prints the bin dir on stdout (last line).
# Env: CRI_TOOLS_VERSION (default: test/versions.sh's),
#      CRITEST_CACHE (default /var/cache/cri-dockerd-ci)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=build-tools
VERSION=${CRI_TOOLS_VERSION:-}
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
VERSION=${VERSION:-$CRI_TOOLS_VERSION}
CACHE="${CRITEST_CACHE:-/var/cache/cri-dockerd-ci}"
BIN="$CACHE/bin/cri-tools-$VERSION"
MOD="sigs.k8s.io/cri-tools"

have_all() { [[ -x $BIN/crictl && -x $BIN/critest ]]; }

# One build at a time: the prebuild, critest and the VM checks may want the tools at once.
# shellcheck source=../lib/cached-build.sh
. "$HERE/../lib/cached-build.sh"
cached_build_start "$BIN.lock" 1800 go
work="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# Source of the module from the Go module cache (downloads from the proxy if missing).
dir="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$MOD@$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
[[ -n "$dir" && -d "$dir" ]] || { log "cannot locate $MOD@$VERSION in the module cache"; exit 1; }

# The module cache is read-only: copy it somewhere writable.
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"

ldflags="-X $MOD/pkg/version.Version=${VERSION#v}"
start=$SECONDS
if [[ ! -x "$BIN/critest" ]]; then
  log "building critest $VERSION (cold build takes a few minutes)"
  (cd "$work/src" && GOFLAGS=-mod=mod go test -c -ldflags "$ldflags" -o "$work/critest" ./cmd/critest)
  mv "$work/critest" "$BIN/critest"
fi
if [[ ! -x "$BIN/crictl" ]]; then
  log "building crictl $VERSION"
  (cd "$work/src" && GOFLAGS=-mod=mod go build -ldflags "$ldflags" -o "$work/crictl" ./cmd/crictl)
  mv "$work/crictl" "$BIN/crictl"
fi
log "built in $((SECONDS - start))s into $BIN"
echo "$BIN"
