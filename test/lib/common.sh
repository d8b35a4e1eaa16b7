# shellcheck shell=bash
# What the test and set-up scripts share; source it, then set LOG_PREFIX (default: the script's
# file name) for log's lines, and LOG_STAMP=clock (the UTC time of day) or LOG_STAMP=elapsed (seconds
# since the script started) to stamp them.
#
#   log MSG...                 MSG on stderr as "PREFIX: MSG" ("PREFIX: 12:00:01 MSG",
#                              "PREFIX [42s]: MSG")
#   die MSG...                 log "FATAL: MSG" and exit 1
#   alive PID                  PID runs (a zombie does not)
#   stop_pid PID NAME [SECS]   SIGTERM, wait up to SECS (15) for it to go, then SIGKILL; reaps
#                              it when it is our child. Nothing to do for an empty or gone PID.
#   stop_group PGID NAME [SECS]  the same for a whole process group (a leader started with setsid)
#   load_factor                the 1-minute load per core, at least 1 (an integer): deadlines
#                              that wait on a busy machine are multiplied by it
#   wait_for SECS WHAT CMD...  runs CMD every 0.2 s until it succeeds; after SECS (times
#                              load_factor) logs "timed out waiting for WHAT" and returns 1
#   quiet CMD...               CMD with its output thrown away (for wait_for)
#   make_bridge NAME NET...    (re)creates the bridge NAME, up, with the .1 address of the first
#                              /24 NET ("10.213.7") that no route uses; prints that address
#
# Every wait here is for an event (a process gone, a command that succeeds); SECS only bounds it.

: "${LOG_PREFIX:=$(basename "$0" .sh)}"

log() {
	case ${LOG_STAMP:-} in
	clock) echo "$LOG_PREFIX: $(date -u +%T) $*" >&2 ;;
	elapsed) echo "$LOG_PREFIX [${SECONDS}s]: $*" >&2 ;;
	*) echo "$LOG_PREFIX: $*" >&2 ;;
	esac
}
die() {
	log "FATAL: $*"
	exit 1
}

# The state field of /proc/PID/stat follows the command's name in parentheses, which may itself
# hold spaces or parentheses: take what follows the last ") ".
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

stop_pid() {
	local pid=$1 name=$2 secs=${3:-15} i
	[[ -n $pid ]] || return 0
	if alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < secs * 10; i++)); do alive "$pid" || break; sleep 0.1; done
		if alive "$pid"; then
			log "$name did not stop within ${secs}s of SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			# Not our child (a pid file's): wait for the kernel to take it away.
			for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
		fi
	fi
	wait "$pid" 2>/dev/null || true
}

stop_group() {
	local pgid=$1 name=$2 secs=${3:-15} i
	[[ -n $pgid ]] || return 0
	if kill -0 -- "-$pgid" 2>/dev/null; then
		kill -TERM -- "-$pgid" 2>/dev/null || true
		for ((i = 0; i < secs * 10; i++)); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 -- "-$pgid" 2>/dev/null; then
			log "$name did not stop within ${secs}s of SIGTERM; killing it"
			kill -KILL -- "-$pgid" 2>/dev/null || true
		fi
	fi
	wait "$pgid" 2>/dev/null || true
}

load_factor() {
	local cores
	cores=$(nproc)
	awk -v c="$cores" '{ f = int($1 / c + 0.999); print (f < 1 ? 1 : f) }' /proc/loadavg
}

wait_for() {
	local secs=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + secs * $(load_factor)))
	until "$@"; do
		if ((SECONDS >= deadline)); then
			log "timed out waiting for $what"
			return 1
		fi
		sleep 0.2
	done
}

quiet() { "$@" >/dev/null 2>&1; }

make_bridge() {
	local name=$1 net addr=
	shift
	ip link show "$name" >/dev/null 2>&1 && ip link del "$name" # a killed run's
	for net in "$@"; do
		ip -4 route | grep -q "^${net//./\\.}\\." && continue
		addr=$net.1
		break
	done
	[[ -n $addr ]] || { log "no free /24 among $* for the bridge $name"; return 1; }
	ip link add "$name" type bridge && ip addr add "$addr/24" dev "$name" && ip link set "$name" up || return 1
	echo "$addr"
}
