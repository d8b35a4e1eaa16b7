#!/usr/bin/env bash
# Builds upstream cri-dockerd (github.com/Mirantis/cri-dockerd) at UPSTREAM_VERSION from the Go
# module proxy, once, into /var/cache/cri-dockerd-ci/upstream/, for the benchmarks that compare
# ours with it on the same dockerd (make bench). Prints the binary's path on stdout.
# About 90 s cold on this VM; a second run finds the binary and takes no time.
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
UPSTREAM_VERSION=${UPSTREAM_VERSION:-v0.4.3}
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
[ -n "$dir" ] || { echo "upstream.sh: go mod download of github.com/Mirantis/cri-dockerd@$UPSTREAM_VERSION failed" >&2; exit 1; }
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$dir"/. "$src"
chmod -R u+w "$src"
echo "upstream.sh: building upstream cri-dockerd $UPSTREAM_VERSION into $BIN" >&2
(cd "$src" && CGO_ENABLED=0 go build -mod=mod -trimpath \
	-ldflags "-X github.com/Mirantis/cri-dockerd/cmd/version.Version=${UPSTREAM_VERSION#v}" -o "$BIN.tmp" .) >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
