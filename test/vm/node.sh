#!/usr/bin/env bash
# A cgroup v2 node for real (what `make vm-node` runs): one boot of the VM test bed, in which
# guest/node.sh runs cri-dockerd over Docker's systemd cgroup driver and then over cgroupfs, and
# checks through crictl against the kernel's cgroup files: RuntimeConfig, the kubelet's
# cgroup_parent, the unified map, OOM kills, stats under load, AppArmor, and a standalone
# kubelet v1.37.2 with a static pod (test/vm/README.md).
#
# Needs bin/cri-dockerd (`make build`; copied with packaging/systemd's units, not the .deb:
# no `make release` per iteration), crictl (test/critest/build-tools.sh's cache), the kubelet
# (test/e2e/build-k8s.sh's cache; NODE_KUBELET=0 runs without it) and the test images of
# `make setup` in the host's Docker. Options go to run.sh (e.g. --timeout 900, --console,
# --out DIR); NODE_DRIVERS, NODE_CHECKS, NODE_KUBELET_DRIVERS and
# NODE_KUBELET_ARGS reach the guest script (guest/node.sh says what they do).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
t0=$SECONDS

bin=${CRI_DOCKERD_BIN:-$root/bin/cri-dockerd}
[ -x "$bin" ] || { echo "node.sh: no $bin; run make build" >&2; exit 1; }
tools=$("$root/test/critest/build-tools.sh" | tail -n1)
kubelet=
if [ "${NODE_KUBELET:-1}" != 0 ]; then
	kubelet="$("$root/test/e2e/build-k8s.sh" --gate | tail -n1)/kubelet"
fi
img=$("$here/image.sh")

in=$(mktemp -d /tmp/cri-dockerd-vm-in.XXXXXX)
trap 'rm -rf "$in"' EXIT
cp "$bin" "$tools/crictl" "$root/packaging/systemd/cri-docker.service" "$root/packaging/systemd/cri-docker.socket" "$in/"
[ -z "$kubelet" ] || cp "$kubelet" "$in/"
docker save -o "$in/pause.tar" registry.k8s.io/pause:3.10
docker save -o "$in/busybox.tar" cri-dockerd-test/busybox:latest
envs=()
for v in NODE_DRIVERS NODE_CHECKS NODE_KUBELET_DRIVERS NODE_KUBELET_ARGS; do
	[ -z "${!v+x}" ] || envs+=(--env "$v=${!v}")
done
echo "node.sh: $("$bin" --version 2>&1 | head -n1) in $(basename "$img"); inputs ready in $((SECONDS - t0))s" >&2
"$here/run.sh" "${envs[@]}" "$@" "$here/guest/node.sh" "$in"/*
