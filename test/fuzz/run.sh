#!/usr/bin/env bash
# One go test -fuzz target for a duration (make fuzz). Go 1.26's fuzz coordinator can report
# its own -fuzztime deadline as a failure, "context deadline exceeded" with no failing input
# (golang/go#75804, fixed in Go 1.27): a worker starved of CPU at the deadline is enough. That
# one outcome is reported and not counted; any other failure is, and so is any run that wrote a
# failing input to testdata/fuzz/.
#
# Usage: run.sh GO PKG TARGET FUZZTIME
set -uo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 GO PKG TARGET FUZZTIME" >&2; exit 2; }
go=$1 pkg=$2 target=$3 fuzztime=$4
corpus=$pkg/testdata/fuzz/$target
# inputs: the names of the corpus's inputs (none when the directory does not exist).
inputs() { find "$corpus" -mindepth 1 -maxdepth 1 ! -name '.*' -printf '%f\n' 2>/dev/null | sort; }
before=$(inputs)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "fuzz $target ./$pkg/ $fuzztime"
"$go" test -run XXX -fuzz "^$target\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "./$pkg/" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
[[ $rc -eq 0 ]] && exit 0
after=$(inputs)
failures=$(grep -c -- '^--- FAIL' "$out" || true)
if [[ $before == "$after" && $failures -eq 1 ]] && grep -q -- "--- FAIL: $target " "$out" &&
	[[ $(grep -A1 -- "--- FAIL: $target " "$out" | tail -1 | tr -d '[:space:]') == contextdeadlineexceeded ]] &&
	! grep -q 'Failing input written to' "$out"; then
	echo "fuzz $target: Go's fuzz coordinator reported its own deadline (golang/go#75804), no failing input: not a failure"
	exit 0
fi
exit "$rc"
