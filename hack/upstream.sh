#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds upstream cri-dockerd (github.com/Mirantis/cri-dockerd) at UPSTREAM_VERSION (the env's,
# else test/versions.sh's) from the Go module proxy, once, into /var/cache/cri-dockerd-ci/upstream/,
# for the benchmarks that compare ours with it on the same dockerd (make bench). Prints the
# binary's path on stdout.
# About 90 s cold on this VM; a second run finds the binary and takes no time.
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../test/lib/common.sh
. "$HERE/../test/lib/common.sh"
LOG_PREFIX=upstream.sh
upstream_env=${UPSTREAM_VERSION:-}
# shellcheck source=../test/versions.sh
. "$HERE/../test/versions.sh"
UPSTREAM_VERSION=${upstream_env:-$UPSTREAM_VERSION}
CACHE=${CRI_DOCKERD_CI_CACHE:-/var/cache/cri-dockerd-ci}/upstream
BIN="$CACHE/cri-dockerd-$UPSTREAM_VERSION"
if [ -x "$BIN" ]; then
	echo "$BIN"
	exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
[ -x "$BIN" ] && { echo "$BIN"; exit 0; }
# The module's zip (the proxy leaves vendor/ out), copied writable; its go.sum pins every dependency.
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/Mirantis/cri-dockerd@$UPSTREAM_VERSION" |
	sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { log "go mod download of github.com/Mirantis/cri-dockerd@$UPSTREAM_VERSION failed"; exit 1; }
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$dir"/. "$src"
chmod -R u+w "$src"
log "building upstream cri-dockerd $UPSTREAM_VERSION into $BIN"
(cd "$src" && CGO_ENABLED=0 go build -mod=mod -trimpath \
	-ldflags "-X github.com/Mirantis/cri-dockerd/cmd/version.Version=${UPSTREAM_VERSION#v}" -o "$BIN.tmp" .) >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
