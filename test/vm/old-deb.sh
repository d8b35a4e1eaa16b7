#!/usr/bin/env bash
# Builds (once) the amd64 .deb of an older commit of ours, the one systemd.sh's guest upgrades
# from, and prints its path. The commit is checked out with `git worktree add --detach` in a
# temporary directory outside the checkout, its own `make release RELEASE_ARCHES=amd64` builds
# it (so its version is that commit's packaging/version.sh: 0.5.0~dev.N.gHASH, N lower than
# ours), and only the .deb is kept, in the cache:
#   /var/cache/cri-dockerd-ci/vm/old-deb/<full commit>/cri-dockerd_<version>_amd64.deb
#
# Usage: test/vm/old-deb.sh [COMMIT]   (default OLD_COMMIT below)
# Env:   VM_CACHE (default /var/cache/cri-dockerd-ci/vm), VM_LOCK_WAIT (seconds to wait for
#        another build, default 1800), GO (default go, as the Makefile).
set -euo pipefail

# 1f4c6ba (2026-12-02): main the day before the Docker-late work (the standby gate, Status
# and Version bounded while Docker does not answer, the store as Docker's one event follower),
# with `make release` and the packaging of today (scripts and units unchanged since but for a
# comment). Changing it builds a new cache entry; the older entries are deleted.
OLD_COMMIT=1f4c6bafbc265546be41c85cb75dc2ff6e81442b

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CACHE=${VM_CACHE:-/var/cache/cri-dockerd-ci/vm}/old-deb
LOCK_WAIT=${VM_LOCK_WAIT:-1800}
want=${1:-$OLD_COMMIT}

commit=$(git -C "$root" rev-parse --verify -q "$want^{commit}") || {
	echo "old-deb.sh: commit $want is not in this clone (a shallow clone? git fetch --unshallow)" >&2
	exit 1
}
for tool in flock make "${GO:-go}"; do
	command -v "$tool" >/dev/null || {
		echo "old-deb.sh: $tool not found" >&2
		exit 1
	}
done

mkdir -p "$CACHE"
out="$CACHE/$commit"
# One build at a time: a second run waits here, then finds the .deb built.
exec 9>"$CACHE/lock"
if ! flock -w "$LOCK_WAIT" 9; then
	echo "old-deb.sh: another old-deb.sh holds $CACHE/lock for more than ${LOCK_WAIT}s" >&2
	exit 1
fi

found() { find "$out" -maxdepth 1 -name 'cri-dockerd_*_amd64.deb' | head -n1; }
if [ -e "$out/.complete" ] && [ -n "$(found)" ]; then
	found
	exit 0
fi

start=$SECONDS
part="$out.partial"
src=$(mktemp -d "${TMPDIR:-/tmp}/cri-dockerd-old-deb.XXXXXX")
# A failed or interrupted build leaves neither half an entry, nor the worktree, nor the build
# running (it has its own process group, stopped first). A SIGKILLed run leaves the directory
# in /tmp; `git worktree prune` below forgets its worktree on the next build.
build=
cleanup() {
	if [ -n "$build" ] && kill -0 "$build" 2>/dev/null; then
		kill -TERM -- "-$build" 2>/dev/null || true
		wait "$build" 2>/dev/null || true
	fi
	git -C "$root" worktree remove --force "$src/tree" >/dev/null 2>&1 || true
	rm -rf "$src" "$part"
	git -C "$root" worktree prune >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
git -C "$root" worktree prune >/dev/null 2>&1 || true
rm -rf "$part"
mkdir -p "$part"
echo "old-deb.sh: building the .deb of ${commit:0:7} (git worktree in $src/tree)" >&2
git -C "$root" worktree add --detach -q "$src/tree" "$commit"
# setsid: the build is a process group of its own (the background subshell is no group leader,
# so setsid does not fork and $! is the group), which cleanup stops whole.
(cd "$src/tree" && exec setsid nice -n 19 make release RELEASE_ARCHES=amd64 ${GO:+GO="$GO"}) >"$part/build.log" 2>&1 &
build=$!
if ! wait "$build"; then
	build=
	tail -n 30 "$part/build.log" >&2
	echo "old-deb.sh: make release of ${commit:0:7} failed" >&2
	exit 1
fi
build=
deb=$(find "$src/tree/dist" -maxdepth 1 -name 'cri-dockerd_*_amd64.deb' | head -n1)
[ -n "$deb" ] || {
	echo "old-deb.sh: make release of ${commit:0:7} made no amd64 .deb" >&2
	exit 1
}
cp "$deb" "$part/"
echo "$((SECONDS - start))" >"$part/build-seconds"
: >"$part/.complete"
rm -rf "$out"
mv "$part" "$out"
# Only the current commit's entry is kept.
find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$commit" -exec rm -rf {} +
echo "old-deb.sh: built $(basename "$deb") in $((SECONDS - start)) s" >&2
found
