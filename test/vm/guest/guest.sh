#!/bin/bash
# Runs inside the guest, started by the image's crid-vm-runner.service once /bed (the host's 9p
# share) is mounted. run.sh copies this file to /bed/guest.sh on every run, so it can change
# without an image rebuild. It runs /bed/script (the host's script) with its working directory
# /bed/in (the host's files), output to /bed/out/output.log and to the console, and its exit code
# to /bed/out/rc; the unit then powers the guest off (SuccessAction/FailureAction=poweroff-force).
set -uo pipefail

out=/bed/out
mkdir -p "$out"
export VM_IN=/bed/in VM_OUT=$out
# --env NAME=VALUE lines from run.sh.
if [ -f /bed/env ]; then
	set -a
	# shellcheck disable=SC1091 # written by run.sh at run time
	. /bed/env
	set +a
fi
cd "$VM_IN" || exit 1
echo "vm: script starts at uptime $(cut -d' ' -f1 /proc/uptime)s"
/bin/bash /bed/script 2>&1 | tee "$out/output.log"
rc=${PIPESTATUS[0]}
echo "vm: script exited $rc at uptime $(cut -d' ' -f1 /proc/uptime)s"
# rc last, written whole: its presence tells the host that the script ended (and when: its mtime
# is the start of the power-off).
echo "$rc" >"$out/rc.tmp" && mv "$out/rc.tmp" "$out/rc"
sync
exit 0
