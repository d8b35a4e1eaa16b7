#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Runs make targets one after the other, each under a timeout, and prints when each starts,
# the machine's load then, how long it took and a summary at the end (make test, make test-all).
#
# Usage: steps.sh [--keep-going] NAME TARGET[:MINUTES]...
#   NAME         a label for the lines it prints (gate, tiers)
#   TARGET       a make target; MINUTES its timeout (default 30), counted in load-scaled time:
#                a second of wall time counts 1/load_factor (test/lib/common.sh), so a step on
#                a busy machine gets the time it would have had at rest. A step that times out
#                gets SIGQUIT first (Go programs print every goroutine's stack: where a test
#                hangs), then SIGTERM, then SIGKILL, its whole process group; it counts as failed.
#   --keep-going runs every step even after one failed (the tiers are independent); without
#                it the first failure ends the run (the gate: a failed step says enough).
# Env: MAKE (the make that called us, for its flags), TIMEOUT_SCALE (multiplies every timeout;
# default 1, for a machine known to be slower than this 2-core one).
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

# end_group PGID SIG: SIG to the step's whole process group, then, for what is left after 10 s
# (a shell's background jobs ignore INT and QUIT), SIGTERM, and SIGKILL after 60 s more.
end_group() {
	local i
	kill -"$2" -- "-$1" 2>/dev/null
	for ((i = 0; i < 10; i++)); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 1; done
	kill -TERM -- "-$1" 2>/dev/null
	for ((i = 0; i < 60; i++)); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 1; done
	kill -KILL -- "-$1" 2>/dev/null
}

child=
stop() {
	trap - INT TERM HUP
	echo "== $name $(date -u +%T): stopped by SIG$1; stopping ${target:-}"
	if [[ -n $child ]]; then
		end_group "$child" "$1"
		wait "$child"
	fi
	exit 130
}
for sig in INT TERM HUP; do
	# shellcheck disable=SC2064 # the signal's name, now
	trap "stop $sig" "$sig"
done

# run_step TARGET SECS: make TARGET in a process group of its own (so that all it started can
# be signalled at once); sets rc (124 when it timed out).
run_step() {
	local budget_ms=0 limit_ms=$(($2 * 1000)) timed_out=0
	setsid "$make" --no-print-directory "$1" &
	child=$!
	while kill -0 "$child" 2>/dev/null; do
		sleep 1
		budget_ms=$((budget_ms + 1000 / $(load_factor)))
		((budget_ms < limit_ms)) && continue
		timed_out=1
		echo "== $name $(date -u +%T) $1: out of time (${2}s of load-scaled time); SIGQUIT for the stacks, then SIGTERM"
		end_group "$child" QUIT
		break
	done
	wait "$child"
	rc=$?
	((timed_out)) && rc=124
	child=
}

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
	run_step "$target" "$secs"
	took=$((SECONDS - t0))
	case $rc in
	0) verdict=passed ;;
	124) verdict="TIMED OUT (${secs}s of load-scaled time)" ;;
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
