#!/usr/bin/env bash
# The VM test bed's smoke test (what `make vm` runs): builds or finds the guest image, boots it
# and runs guest/smoke.sh in it (systemd PID 1, cgroup v2, Docker's systemd cgroup driver, a
# container from a tar). Options go to run.sh (e.g. --timeout 600, --console, --out DIR).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

t0=$SECONDS
img=$("$here/image.sh")
took=$((SECONDS - t0))
echo "smoke: image $(basename "$img"): ${took}s here (built in $(cat "$img/build-seconds")s; cached in $img, $(du -sh "$img" | cut -f1) on disk)" >&2

exec "$here/run.sh" "$@" "$here/guest/smoke.sh" "$img/busybox-rootfs.tar"
