#!/usr/bin/env bash
# critest in the VM test bed: the CRI validation suite against cri-dockerd on a cgroup v2 node
# with systemd as PID 1 and Docker's systemd cgroup driver (what `make vm-critest` and, with a
# focus, `make vm-critest-groups` run).
#
# Usage: test/vm/critest.sh [--focus REGEX] [run.sh options]
#   --focus REGEX  run only the specs whose names match (critest's -ginkgo.focus); the report
#                  then leaves out the expected-failure lines whose specs did not run
# Needs bin/cri-dockerd (make build), the critest stand-in images in the registry's cache
# (test/critest/registry.sh, run by make critest) and Debian's docker-registry on the host;
# they are copied into the guest, which serves them itself (it has no network).
# The failures are compared with test/vm/critest-expected-failures.txt (test/lib/expected-failures.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
focus=
if [ "${1:-}" = --focus ]; then
	focus=$2
	shift 2
fi
bin=$root/bin/cri-dockerd
[ -x "$bin" ] || { echo "vm critest: no $bin; run make build" >&2; exit 1; }
reg=/var/cache/cri-dockerd-ci/registry
in=$(mktemp -d /tmp/cri-dockerd-vm-in.XXXXXX)
out=$(mktemp -d /tmp/cri-dockerd-vm-critest.XXXXXX)
trap 'rm -rf "$in"' EXIT
# The registry's storage, made (or found) and copied under critest's own lock: a critest run on
# the host (test/critest/run.sh holds the lock) serves from it and stops it at its end.
(
	flock -w 3600 9 || { echo "vm critest: critest.lock is held" >&2; exit 1; }
	"$root/test/critest/registry.sh" >/dev/null
	"$root/test/critest/registry.sh" stop >/dev/null
	if [ ! -s "$reg/certs/server.crt" ] || [ ! -d "$reg/data" ]; then
		echo "vm critest: no registry data in $reg" >&2
		exit 1
	fi
	tar -C "$reg" -cf "$in/registry-data.tar" data
) 9>/var/cache/cri-dockerd-ci/critest.lock
tools=$("$root/test/critest/build-tools.sh" | tail -n1)
"$here/image.sh" >/dev/null # built (once) now, before the inputs; run.sh finds it

cp "$bin" "$tools/crictl" "$tools/critest" /usr/bin/docker-registry "$in/"
docker save -o "$in/pause.tar" registry.k8s.io/pause:3.10
mkdir "$in/certs"
cp "$reg/certs/ca.crt" "$reg/certs/server.crt" "$reg/certs/server.key" "$in/certs/"
jq '.name = "crid-critest" | .plugins[0].bridge = "crid-ct0" | .plugins[0].ipam.ranges = [[{subnet: "10.97.0.0/16"}]]' \
	"$root/packaging/cni/10-cri-dockerd-bridge.conflist" >"$in/10-critest.conflist"
printf '%s' "$focus" >"$in/focus"
echo "vm critest: focus '${focus:-none}', output in $out" >&2
set +e
"$here/run.sh" --out "$out" "$@" "$here/guest/critest.sh" "$in"/*
rc=$?
set -e
junit=$out/junit.xml
if [ ! -s "$junit" ]; then
	echo "vm critest: the guest wrote no junit report (run.sh exit $rc); see $out" >&2
	exit 1
fi
partial=()
[ -n "$focus" ] && partial=(--partial)
python3 "$root/test/lib/expected-failures.py" --name "vm critest" "${partial[@]}" "$here/critest-expected-failures.txt" "$junit"
