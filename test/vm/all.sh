#!/usr/bin/env bash
# The VM test bed's checks (`make vm-checks`, one of the tiers): the .deb under systemd
# (systemd.sh), the node's cgroup v2 kernel under both of Docker's cgroup drivers with a kubelet
# and AppArmor (node.sh), and critest's groups (critest.sh --focus). One after the other: each
# boots its own guest. Each one's inputs are copied at its start, so the host's later steps may
# rebuild dist/ and bin/ meanwhile.
# Exits non-zero when any failed; every one runs.
# --full (make vm-full): the kubelet under both drivers and the whole critest suite (about 75
# minutes more under software emulation).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
full=0
[ "${1:-}" = --full ] && full=1
groups=${VM_CRITEST_GROUPS:-Container OOM|listing stats|Privileged is true|Container Mount Propagation}
failed=()
run() {
	local name=$1 begin=$SECONDS
	shift
	echo "== $(date -u +%T) vm $name"
	if "$@"; then
		echo "== vm $name: PASS in $((SECONDS - begin)) s"
	else
		echo "== vm $name: FAIL (exit $?) in $((SECONDS - begin)) s"
		failed+=("$name")
	fi
}
# Each bounded well above its time on an idle machine: beside the host's tests the guest gets
# the CPU they leave.
run systemd "$here/systemd.sh" --timeout 1800
# The kubelet check under the kubelet's default driver (systemd) only: under cgroupfs too
# (make vm-node) it costs about 65 s more.
if [ $full = 1 ]; then
	NODE_KUBELET_DRIVERS="systemd cgroupfs" run node "$here/node.sh" --timeout 2400
	run critest "$here/critest.sh" --timeout 7200
else
	NODE_KUBELET_DRIVERS=${NODE_KUBELET_DRIVERS-systemd} run node "$here/node.sh" --timeout 2400
	run critest-groups "$here/critest.sh" --focus "$groups" --timeout 2400
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "== vm: failed: ${failed[*]}"
	exit 1
fi
echo "== vm: all passed"
