#!/usr/bin/env bash
# The VM test bed's part of `make test`, run beside the host's tests: `background.sh start`
# starts test/vm/all.sh in the background (setsid, nice 19, idle I/O class) and returns;
# `background.sh wait` waits for it (bounded), prints its log and exits with its status;
# `background.sh stop` kills it and its VM (.ci/run's exit trap, make's interrupts).
#
# Why beside, not after: the guest is a separate kernel that shares nothing with the host's
# tests but the CPU, and under qemu's software emulation its runs take minutes of mostly one
# busy core, while the host's integration tests and critest leave a core idle most of the time.
# At nice 19 the host's tests keep their CPU; the guest gets what they leave, and its waits are
# bounded generously for that (test/vm/README.md).
#
# Files: $VM_BG (default /tmp/cri-dockerd-vm-bg): pid, log, rc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${VM_BG:-/tmp/cri-dockerd-vm-bg}
log() { echo "vm background: $*" >&2; }

running() {
	local pid
	pid=$(cat "$dir/pid" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null
}

case "${1:-}" in
start)
	if running; then
		log "already running (pid $(cat "$dir/pid")); stopping it first"
		"$0" stop
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	# The children are in a session of their own: make's job control and signals do not reach
	# them; stop kills the whole session.
	setsid nice -n 19 ionice -c 3 bash -c '"$1"; echo $? >"$2/rc"' all "$here/all.sh" "$dir" >"$dir/log" 2>&1 </dev/null &
	echo $! >"$dir/pid"
	log "started test/vm/all.sh (pid $!, log $dir/log)"
	;;
wait)
	[ -f "$dir/pid" ] || { log "nothing was started ($dir/pid is missing)"; exit 1; }
	bound=${VM_BG_WAIT:-3600}
	begin=$SECONDS
	while running && [ $((SECONDS - begin)) -lt "$bound" ]; do sleep 5; done
	if running; then
		log "still running after ${bound}s of waiting; stopping it"
		"$0" stop
	fi
	log "waited $((SECONDS - begin))s; its log:"
	cat "$dir/log"
	rc=$(cat "$dir/rc" 2>/dev/null || echo 1)
	log "test/vm/all.sh exited $rc"
	exit "$rc"
	;;
stop)
	if running; then
		pid=$(cat "$dir/pid")
		# The session's processes: all.sh, run.sh and qemu (run.sh kills qemu on its way out).
		pkill -TERM -s "$pid" 2>/dev/null || true
		for _ in $(seq 1 30); do pgrep -s "$pid" >/dev/null || break; sleep 1; done
		pkill -KILL -s "$pid" 2>/dev/null || true
		log "stopped (session $pid)"
	fi
	;;
*)
	echo "usage: $0 start|wait|stop" >&2
	exit 2
	;;
esac
