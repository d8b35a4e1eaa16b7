#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds the local images the integration tests use. No registry is reachable from CI, so they
# are made from local files: busybox from Debian's package (docker import), the pause image from
# test/images/pause (docker build FROM scratch). Needs a running dockerd (see docker.sh).
#
# An image is skipped when it exists and was built from the same sources (a label holds their
# hash); FORCE=1 rebuilds anyway.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DOCKER=/usr/bin/docker          # Debian's client, matching the 20.10 daemon
export DOCKER_BUILDKIT=0        # the classic builder: no buildx plugin needed, FROM scratch offline
BUSYBOX_IMAGE=cri-dockerd-test/busybox:latest
PAUSE_IMAGE=registry.k8s.io/pause:3.10
LABEL=io.cri-dockerd.test.source-hash

# shellcheck source=../test/lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=images.sh

"$DOCKER" version >/dev/null 2>&1 || { log "dockerd does not answer; run $HERE/docker.sh first"; exit 1; }

# up_to_date IMAGE HASH: the image exists and carries HASH (and FORCE is not set).
up_to_date() {
  [[ ${FORCE:-0} != 1 ]] &&
    [[ $("$DOCKER" image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null) == "$2" ]]
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# busybox: dynamically linked Debian busybox with every applet as /bin/<applet>.
hash=$(sha256sum <"$HERE/busybox-rootfs.sh" | cut -c1-16)
if up_to_date "$BUSYBOX_IMAGE" "$hash"; then
  log "$BUSYBOX_IMAGE is up to date"
else
  log "building $BUSYBOX_IMAGE"
  "$HERE/busybox-rootfs.sh" "$work/rootfs"
  # PATH as in the upstream busybox image, so exec without a full path works under any runtime.
  tar -C "$work/rootfs" -c . | "$DOCKER" import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["/bin/sh"]' -c "LABEL $LABEL=$hash" - "$BUSYBOX_IMAGE" >/dev/null
fi

# pause: the sandbox image under the name cri-dockerd uses by default, so nothing is pulled.
hash=$(cat "$ROOT/test/images/pause/"*.go | sha256sum | cut -c1-16)
if up_to_date "$PAUSE_IMAGE" "$hash"; then
  log "$PAUSE_IMAGE is up to date"
else
  log "building $PAUSE_IMAGE"
  mkdir -p "$work/pause"
  # Static, so it runs in an empty image.
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/pause/pause" ./test/images/pause)
  cat >"$work/pause/Dockerfile" <<DOCKERFILE
FROM scratch
COPY pause /pause
LABEL $LABEL=$hash
ENTRYPOINT ["/pause"]
DOCKERFILE
  "$DOCKER" build -q -t "$PAUSE_IMAGE" "$work/pause" >/dev/null
fi

"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$BUSYBOX_IMAGE"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$PAUSE_IMAGE"
