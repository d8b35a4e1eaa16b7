#!/usr/bin/env bash
# Our .deb under systemd in the VM test bed (what `make vm-systemd` runs): the guest installs an
# older .deb of ours with apt, upgrades it to this checkout's, and runs guest/systemd.sh on
# (socket activation, Docker down at start, reinstall, purge). Needs dist/'s amd64 .deb (`make
# release`), crictl (cached by test/critest/build-tools.sh) and the test images of `make setup`
# in the host's Docker; the older .deb is built once by old-deb.sh (cached).
# Options go to run.sh (e.g. --timeout 900, --console, --out DIR).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

deb=$(find "$root/dist" -maxdepth 1 -name 'cri-dockerd_*_amd64.deb' 2>/dev/null | sort | tail -n1)
[ -n "$deb" ] || { echo "systemd.sh: no dist/cri-dockerd_*_amd64.deb; run make release" >&2; exit 1; }
in=$(mktemp -d /tmp/cri-dockerd-vm-in.XXXXXX)
trap 'rm -rf "$in"' EXIT
# Copied first: dist/ may be rebuilt meanwhile (a make release of another run).
cp "$deb" "$in/"
deb=$in/$(basename "$deb")
old=$("$here/old-deb.sh")
# The upgrade must be one for dpkg: ours sorts above the old one (0.5.0~dev.N.gHASH, N counting
# the commits).
new_v=$(dpkg-deb -f "$deb" Version)
old_v=$(dpkg-deb -f "$old" Version)
dpkg --compare-versions "$new_v" gt "$old_v" || {
	echo "systemd.sh: $(basename "$deb") ($new_v) is not newer than the old $(basename "$old") ($old_v) for dpkg" >&2
	exit 1
}
tools=$("$root/test/critest/build-tools.sh" | tail -n1)
img=$("$here/image.sh")

cp "$tools/crictl" "$in/"
mkdir "$in/old"
cp "$old" "$in/old/"
docker save -o "$in/pause.tar" registry.k8s.io/pause:3.10
docker save -o "$in/busybox.tar" cri-dockerd-test/busybox:latest
# A pod on the node's network: the guest has no CNI config, and this step is not about CNI.
cat >"$in/pod.json" <<'JSON'
{"metadata": {"name": "vm-pod", "namespace": "default", "uid": "vm-pod-uid"},
 "linux": {"security_context": {"namespace_options": {"network": 2}}},
 "log_directory": "/var/log/pods/vm-pod"}
JSON
# The container ends on SIGTERM (a shell's PID 1 ignores it otherwise): its stop takes no 10 s.
cat >"$in/container.json" <<'JSON'
{"metadata": {"name": "app"}, "image": {"image": "cri-dockerd-test/busybox:latest"},
 "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"], "log_path": "app.log"}
JSON
echo "systemd.sh: $(basename "$old") upgraded to $(basename "$deb") in $(basename "$img")" >&2
"$here/run.sh" "$@" "$here/guest/systemd.sh" "$in"/*
