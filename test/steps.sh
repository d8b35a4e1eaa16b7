#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Runs make targets one after the other, each under a timeout, and prints when each starts,
# the machine's load then, how long it took and a summary at the end (make test, make test-all).
#
# Usage: steps.sh [--keep-going] NAME TARGET[:MINUTES]...
#   NAME         a label for the lines it prints (gate, tiers)
#   TARGET       a make target; MINUTES its timeout (default 30). A step that times out is
#                killed with its process group and counts as failed.
#   --keep-going runs every step even after one failed (the tiers are independent); without
#                it the first failure ends the run (the gate: a failed step says enough).
# Env: MAKE (the make that called us, for its flags), TIMEOUT_SCALE (multiplies every timeout;
# default 1, for a machine known to be slower or busier than this 2-core one at rest).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
. "$here/lib/common.sh"
LOG_PREFIX=steps

keep_going=0
if [[ ${1:-} == --keep-going ]]; then keep_going=1; shift; fi
(($# >= 2)) || die "usage: $0 [--keep-going] NAME TARGET[:MINUTES]..."
name=$1
shift
make=${MAKE:-make}
scale=${TIMEOUT_SCALE:-1}

load() { cut -d' ' -f1-3 /proc/loadavg; }

child=
stop() {
	trap - INT TERM HUP
	echo "== $name $(date -u +%T): stopped by SIG$1; stopping ${target:-}"
	if [[ -n $child ]]; then
		kill -"$1" "$child" 2>/dev/null
		wait "$child"
	fi
	exit 130
}
for sig in INT TERM HUP; do
	# shellcheck disable=SC2064 # the signal's name, now
	trap "stop $sig" "$sig"
done

summary=()
failed=()
start_all=$SECONDS
for step in "$@"; do
	target=${step%%:*}
	minutes=30
	[[ $step == *:* ]] && minutes=${step#*:}
	secs=$(awk -v m="$minutes" -v s="$scale" 'BEGIN { t = int(m * 60 * s + 0.5); print (t < 1 ? 1 : t) }')
	echo "== $name $(date -u +%T) $target: start (timeout ${secs}s, load $(load))"
	t0=$SECONDS
	# timeout runs the step in a process group of its own, which it signals whole (make and
	# what make started) when the time is up, then KILLs; it also passes on a signal it gets,
	# which is how our own INT, TERM or HUP (a Ctrl-C, a CI stop) reaches the step.
	timeout -k 60 "$secs" "$make" --no-print-directory "$target" &
	child=$!
	wait "$child"
	rc=$?
	took=$((SECONDS - t0))
	case $rc in
	0) verdict=passed ;;
	124 | 137) verdict="TIMED OUT after ${secs}s" ;;
	*) verdict="FAILED (exit $rc)" ;;
	esac
	echo "== $name $(date -u +%T) $target: $verdict in ${took}s (load $(load))"
	summary+=("$(printf '%-22s %6ss  %s' "$target" "$took" "$verdict")")
	if ((rc != 0)); then
		failed+=("$target")
		((keep_going)) || break
	fi
done

echo "== $name: $((SECONDS - start_all))s in all (load $(load))"
printf '   %s\n' "${summary[@]}"
if ((${#failed[@]})); then
	echo "== $name: FAILED: ${failed[*]}"
	exit 1
fi
echo "== $name: passed"
