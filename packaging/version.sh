#!/usr/bin/env bash
# Prints the version of this checkout, the one the binary reports (--version) and the packages
# carry, so `make build` and `make release` agree. A release tag vX.Y.Z gives X.Y.Z; without a
# tag (our clones have none) the base in the top-level VERSION file gives BASE~dev.N.gHASH, where
# N counts the commits so later builds sort higher. "~" sorts before the release in dpkg and
# rpm (0.5.0~dev.9 < 0.5.0) and BASE is above upstream cri-dockerd's 0.4.x, so our packages
# upgrade theirs. Commits after a tag give X.Y.Z+N.gHASH; uncommitted changes add ".dirty".
# A tag below BASE is ignored: after a release VERSION moves on to the next one, and upstream's
# tags (v0.4.3) fetched into a clone must not win.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(tr -d ' \n' < VERSION)
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "$base~dev"   # not a git checkout (a source tarball)
  exit 0
fi
hash=$(git rev-parse --short=7 HEAD)
tag=$(git describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null) || tag=
if [[ -n $tag && $(printf '%s\n' "$base" "${tag#v}" | sort -V | head -n1) != "$base" ]]; then
  tag=
fi
if [[ -n $tag ]]; then
  v=${tag#v}
  v=${v//-/\~}       # a pre-release tag v1.0.0-rc.1 sorts before 1.0.0: 1.0.0~rc.1
  n=$(git rev-list --count "$tag..HEAD")
  [[ $n == 0 ]] || v="$v+$n.g$hash"
else
  v="$base~dev.$(git rev-list --count HEAD).g$hash"
fi
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  [[ $v == *[~+]* ]] && v="$v.dirty" || v="$v+dirty"
fi
echo "$v"
