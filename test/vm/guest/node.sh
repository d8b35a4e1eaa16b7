#!/bin/bash
# A cgroup v2 node for real, run inside the guest by test/vm/node.sh: cri-dockerd (bin/ plus
# packaging's systemd units) over Docker 20.10, once with Docker's systemd cgroup driver and
# again with cgroupfs (daemon.json, Docker and cri-dockerd restarted), checked through crictl
# against the kernel's cgroup files: RuntimeConfig, cgroup_parent as the kubelet names it, the
# unified map, OOM kills (memory.oom.group 1 and 0), stats under load, AppArmor, and a
# standalone kubelet v1.37.2 with a static pod. Each check prints "node: ..." lines with what it
# saw, and PASS/FAIL; a failed check does not stop the others. Exit 1 if any check failed.
#
# Inputs in $VM_IN: cri-dockerd, cri-docker.service, cri-docker.socket, crictl, kubelet (optional),
# pause.tar and busybox.tar. Env: NODE_DRIVERS (default "systemd cgroupfs"), NODE_KUBELET_DRIVERS
# (the drivers whose pass runs the kubelet check, default "systemd cgroupfs"; "systemd" saves
# about 65 s; "" runs it in none), NODE_CHECKS (the checks to run, default all:
# runtime-config cgroup-parent unified oom stats apparmor kubelet checkpoint; checkpoint runs
# last, in the last driver's pass, and turns on Docker's experimental mode), NODE_KUBELET_ARGS (more
# kubelet flags, e.g. --v=2).
# shellcheck disable=SC2317 # helpers defined inside checks are called through wait_for
set -uo pipefail
# set -e (in the checks) holds inside $(...) too: a failed helper there ends the check.
shopt -s inherit_errexit

T_START=$EPOCHREALTIME
sock=unix:///var/run/cri-dockerd.sock
BUSYBOX=cri-dockerd-test/busybox:latest
W=/tmp/node
mkdir -p "$W"
DRIVERS=${NODE_DRIVERS:-systemd cgroupfs}
KUBELET_DRIVERS=${NODE_KUBELET_DRIVERS-systemd cgroupfs}
CHECKS=${NODE_CHECKS:-runtime-config cgroup-parent unified oom stats apparmor kubelet checkpoint}
# shellcheck disable=SC2206 # flags, split on spaces
KUBELET_ARGS=(${NODE_KUBELET_ARGS:-})
# A check's own diagnostics, printed by fail and on an unexpected failure: a function name.
DIAG=
DRIVER=setup
TIMES=()
# The check running (its files in $W: err.$CK, ctrs.$CK, fail-said.$CK; checks run at once).
CK=setup

say() { echo "node: $*"; }
# since T: seconds since the $EPOCHREALTIME value T, one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# fail MSG: prints the failure with diagnostics and ends the check (each check runs in a
# subshell) or, in the setup, the script. To stderr, so that it shows from inside $(...) too;
# $W/fail-said.$CK tells run_check it was said.
fail() {
	: >"$W/fail-said.$CK"
	echo "node: FAIL [$DRIVER] $*" >&2
	[ -z "$DIAG" ] || "$DIAG" >&2
	{
		echo "--- docker ps -a"
		docker ps -a --format '{{.ID}} {{.Names}} {{.Status}}' | head -20
		echo "--- journal of cri-docker.service (last 25 lines)"
		journalctl -u cri-docker.service --no-pager -o cat 2>&1 | tail -25
	} | sed 's/^/node:   | /' >&2
	exit 1
}
# wait_for SECS CMD...: runs CMD every second until it succeeds, for at most SECS in all.
wait_for() {
	local end=$((SECONDS + $1))
	shift
	while [ "$SECONDS" -lt "$end" ]; do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	return 1
}
# crictl runs from the guest's disk (setup_crid copies it): run from the 9p share, each call
# read its 40 MB again (3-10 s a call under TCG). /etc/crictl.yaml names the endpoints.
crictl() { /usr/local/bin/crictl "$@"; }
runtime_ready() { crictl info 2>/dev/null | tr -d ' \n' | grep -o '{[^{}]*"RuntimeReady"[^{}]*}' | grep '"status":true' >/dev/null; }
docker_driver_is() { [ "$(docker info -f '{{.CgroupDriver}}' 2>/dev/null)" = "$1" ]; }
# jval JSON KEY: the first `"KEY": {"value": "N"}` of crictl's JSON (protojson: uint64 as strings).
jval() { printf '%s' "$1" | tr -d ' \n' | grep -o "\"$2\":{\"value\":\"[0-9]*\"}" | head -n1 | sed 's/.*:"\([0-9]*\)"}$/\1/'; }
# cg_of CTR: the container's cgroup (cgroup v2: one line "0::/path" in /proc/PID/cgroup).
pid_of() { docker inspect -f '{{.State.Pid}}' "$1"; }
cg_of() { sed -n 's/^0:://p' "/proc/$(pid_of "$1")/cgroup"; }
cgfile() { cat "/sys/fs/cgroup$1/$2" 2>&1; }
# kv FILE KEY: the value of KEY in a flat-keyed cgroup file (cpu.stat, memory.stat, memory.events).
kv() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
state_of() { crictl inspect -o go-template --template '{{.status.state}}' "$1" 2>/dev/null; }
is_state() { [ "$(state_of "$1")" = "$2" ]; }
# A kubelet left running (a failed kubelet check) would kill the next checks' pods: it removes
# the pods it does not know.
stop_kubelet() {
	if systemctl is-active --quiet crid-kubelet.service; then
		rm -f /etc/kubernetes/manifests/static.yaml
		systemctl stop crid-kubelet.service
		say "cleanup: stopped the kubelet"
	fi
}
# cleanup_pods: every pod goes. Containers first with crictl rm -f (StopContainer with timeout
# 0): a `sleep` as a container's PID 1 ignores SIGTERM, and StopPodSandbox would give each its
# 10 s grace.
cleanup_pods() {
	stop_kubelet
	crictl rm -fa >/dev/null 2>&1 || true
	crictl rmp -fa >/dev/null 2>&1 || true
	rm -f "$W/pod.cur"
	local left
	left=$(docker ps -aq --filter name=k8s_)
	if [ -n "$left" ]; then
		say "cleanup: docker rm -f of k8s_ containers left after crictl rmp -fa: $(echo "$left" | tr '\n' ' ')"
		echo "$left" | xargs docker rm -f >/dev/null 2>&1 || true
	fi
}

# One pod per driver's pass holds the checks' containers (a pod costs about 15 s to run and
# remove under TCG): the cgroup-parent check's, with the kubelet's cgroup_parent, or one without
# it ("plain") where that check left none. Each check removes its own containers.
# mkpod NAME UID [CGROUP_PARENT]: a pod config on the node's network (no CNI is needed).
mkpod() {
	mkdir -p "/var/log/pods/$DRIVER-$1"
	cat >"$W/pod.$1.json" <<EOF
{"metadata": {"name": "$1", "namespace": "node", "uid": "$2"},
 "linux": {"cgroup_parent": "${3:-}", "security_context": {"namespace_options": {"network": 2}}},
 "log_directory": "/var/log/pods/$DRIVER-$1"}
EOF
}
# mkctr NAME COMMAND_JSON [LINUX_JSON]: a busybox container config (names are unique per pass).
mkctr() {
	cat >"$W/ctr.$1.json" <<EOF
{"metadata": {"name": "$1"}, "image": {"image": "$BUSYBOX"}, "command": $2,
 "log_path": "$1.log", "linux": ${3:-{\}}}
EOF
}
# runp NAME: runs the pod and makes it the pod of the next create calls ($POD_FILE: id and
# config; the pass's pod, $W/pod.cur, unless a check sets POD_FILE to a pod of its own); fails
# the check with crictl's error.
POD_FILE=$W/pod.cur
runp() {
	local id
	id=$(crictl runp "$W/pod.$1.json" 2>"$W/err.$CK") || fail "crictl runp $1: $(cat "$W/err.$CK")"
	echo "$id $W/pod.$1.json" >"$POD_FILE"
}
# pod_id: the pod of the next create calls, the pass's one run without cgroup_parent if there
# is none yet.
pod_id() {
	if [ ! -s "$POD_FILE" ]; then
		mkpod plain 0c3d2b1a-0000-4000-8000-00000000000p
		runp plain
	fi
	cut -d' ' -f1 "$POD_FILE"
}
# create NAME: creates the container in the pass's pod (recorded in $W/ctrs.$CK for removal),
# prints its id; start NAME ID; run_ctr NAME: both.
create() {
	local id
	pod_id >/dev/null
	id=$(crictl create "$(pod_id)" "$W/ctr.$1.json" "$(cut -d' ' -f2 "$POD_FILE")" 2>"$W/err.$CK") || fail "crictl create $1: $(cat "$W/err.$CK")"
	echo "$id" >>"$W/ctrs.$CK"
	echo "$id"
}
start() { crictl start "$2" >/dev/null 2>"$W/err.$CK" || fail "crictl start $1 (${2:0:12}): $(cat "$W/err.$CK")"; }
run_ctr() {
	local id
	id=$(create "$1")
	start "$1" "$id"
	echo "$id"
}

# run_check NAME FUNC: runs FUNC in a subshell (fail ends only it), times it, removes its
# containers, and writes its result line to $W/res.$DRIVER.NAME.
run_check() {
	local name=$1 t=$EPOCHREALTIME rc st
	shift
	case " $CHECKS " in *" $name "*) ;; *) return 0 ;; esac
	CK=$name
	say "--- [$DRIVER] $name"
	rm -f "$W/fail-said.$CK" "$W/ctrs.$CK" "$W/pod.$CK"
	(
		# set -e ends the check at an unexpected failure: say which command it was.
		trap 'rc=$?; case $rc in 0 | 3) ;; *) [ -e "$W/fail-said.$CK" ] || { echo "node: FAIL [$DRIVER] $name: exit $rc at: $BASH_COMMAND"; [ -z "$DIAG" ] || "$DIAG"; } >&2 ;; esac' EXIT
		set -e
		"$@"
	)
	rc=$?
	[ "$name" != kubelet ] || cleanup_pods
	if [ -s "$W/ctrs.$CK" ]; then
		# shellcheck disable=SC2046 # container ids
		crictl rm -f $(cat "$W/ctrs.$CK") >/dev/null 2>&1 || true
	fi
	[ ! -s "$W/pod.$CK" ] || crictl rmp -f "$(cut -d' ' -f1 "$W/pod.$CK")" >/dev/null 2>&1 || true
	case $rc in
	0) st=PASS ;;
	3) st=SKIP ;;
	*) st=FAIL ;;
	esac
	printf '%-9s %-18s %-4s %6ss\n' "$DRIVER" "$name" "$st" "$(since "$t")" >"$W/res.$DRIVER.$name"
	say "[$DRIVER] $name: $st ($(since "$t")s)"
}
# run_parallel NAME:FUNC...: the checks at the same time (their containers share the pass's
# pod, which exists by then; the guest's two CPUs are otherwise half idle while Docker, runc
# and systemd work through one check's containers), each one's output shown whole, in order.
run_parallel() {
	local spec pids=() t=$EPOCHREALTIME
	for spec in "$@"; do
		run_check "${spec%%:*}" "${spec#*:}" >"$W/out.${spec%%:*}" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	for spec in "$@"; do cat "$W/out.${spec%%:*}"; done
	TIMES+=("$(printf '%-9s %-18s %6ss' "$DRIVER" "checks at once" "$(since "$t")")")
	say "time [$DRIVER] ${*%%:*} at once: $(since "$t")s"
}
# phase NAME FUNC: a timed step that must work (its failure ends the script).
phase() {
	local name=$1 t=$EPOCHREALTIME
	shift
	"$@"
	TIMES+=("$(printf '%-9s %-18s %6ss' "$DRIVER" "$name" "$(since "$t")")")
	say "time [$DRIVER] $name: $(since "$t")s"
}

# ---- setup ----

setup_swap() {
	# The guest has swap, as nodes that use it do (failSwapOn: false for the kubelet).
	if ! { fallocate -l 256M /swapfile 2>/dev/null || dd if=/dev/zero of=/swapfile bs=1M count=256 status=none; } ||
		! chmod 600 /swapfile || ! mkswap -q /swapfile || ! swapon /swapfile; then
		fail "swap on /swapfile"
	fi
	say "swap: $(tail -n +2 /proc/swaps | tr -s ' \t' ' ')"
	say "kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
	say "AppArmor enabled: $(cat /sys/module/apparmor/parameters/enabled 2>&1); PSI: $([ -e /proc/pressure/io ] && echo yes || echo no)"
}
setup_docker() {
	wait_for 300 docker info || fail "docker not ready 300 s after the script started"
	docker load -i "$VM_IN/pause.tar" >/dev/null || fail "docker load pause.tar"
	docker load -i "$VM_IN/busybox.tar" >/dev/null || fail "docker load busybox.tar"
	say "docker $(docker version --format '{{.Server.Version}}') ready at uptime $(uptime_s)s, driver $(docker info -f '{{.CgroupDriver}} (cgroup v{{.CgroupVersion}})'), images loaded"
}
setup_crid() {
	install -m 0755 "$VM_IN/cri-dockerd" "$VM_IN/crictl" /usr/local/bin/
	printf 'runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 90\n' "$sock" "$sock" >/etc/crictl.yaml
	install -m 0644 "$VM_IN/cri-docker.service" "$VM_IN/cri-docker.socket" /etc/systemd/system/
	systemctl daemon-reload
	systemctl start cri-docker.socket cri-docker.service || fail "systemctl start cri-docker"
	wait_for 120 runtime_ready || fail "cri-dockerd not ready within 120 s"
	say "$(/usr/local/bin/cri-dockerd --version 2>&1 | head -n1) ready (bin/ and packaging/systemd units)"
	[ -e /etc/resolv.conf ] || echo 'nameserver 127.0.0.1' >/etc/resolv.conf # the kubelet reads it
}
switch_driver() {
	local d=$1
	systemctl stop cri-docker.service cri-docker.socket
	[ ! -s /etc/docker/daemon.json ] || say "daemon.json was: $(tr -d '\n' </etc/docker/daemon.json)"
	printf '{"exec-opts":["native.cgroupdriver=%s"]}\n' "$d" >/etc/docker/daemon.json
	systemctl restart docker.service || fail "systemctl restart docker"
	wait_for 180 docker_driver_is "$d" || fail "docker does not report cgroup driver $d within 180 s: $(docker info -f '{{.CgroupDriver}}' 2>&1)"
	systemctl start cri-docker.socket cri-docker.service || fail "systemctl start cri-docker"
	wait_for 120 runtime_ready || fail "cri-dockerd not ready within 120 s of the switch"
	say "docker restarted with daemon.json $(tr -d '\n' </etc/docker/daemon.json): driver $(docker info -f '{{.CgroupDriver}}'); cri-dockerd restarted"
}

# ---- checks ----

# 1. RuntimeConfig reports Docker's driver.
check_runtime_config() {
	local out got
	out=$(crictl runtime-config 2>&1) || fail "crictl runtime-config: $out"
	got=$(printf '%s\n' "$out" | awk '/cgroup driver:/ { print $3 }')
	say "RuntimeConfig cgroup driver: ${got:-none}; docker info: $(docker info -f '{{.CgroupDriver}}, cgroup v{{.CgroupVersion}}')"
	[ "$got" = "$WANT_RC" ] || fail "RuntimeConfig says '${got:-$out}', want $WANT_RC"
}

# 2. cgroup_parent as the kubelet names the pod's cgroup for each driver.
check_cgroup_parent() {
	local uid=5f0c1e2a-7b3d-4c8e-9a6f-0d1e2f3a4b5c parent want_sb want_ctr pod ctr got_sb got_ctr
	if [ "$DRIVER" = systemd ]; then
		parent="/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${uid//-/_}.slice"
	else
		parent="/kubepods/besteffort/pod$uid"
	fi
	mkpod parent "$uid" "$parent"
	mkctr app '["sleep", "3600"]'
	say "pod cgroup_parent $parent"
	rm -f "$W/pod.cur"
	runp parent
	pod=$(pod_id)
	ctr=$(run_ctr app)
	if [ "$DRIVER" = systemd ]; then
		want_sb="$parent/docker-$pod.scope" want_ctr="$parent/docker-$ctr.scope"
	else
		want_sb="$parent/$pod" want_ctr="$parent/$ctr"
	fi
	got_sb=$(cg_of "$pod") got_ctr=$(cg_of "$ctr")
	say "sandbox cgroup $got_sb"
	say "container cgroup $got_ctr"
	[ "$got_sb" = "$want_sb" ] || fail "sandbox cgroup $got_sb, want $want_sb"
	[ "$got_ctr" = "$want_ctr" ] || fail "container cgroup $got_ctr, want $want_ctr"
}

# 3. The unified map reaches the container's cgroup files.
check_unified() {
	local lim nol cg f want got bad=
	mkctr limited '["sleep", "3600"]' '{"resources": {"memory_limit_in_bytes": 134217728,
		"unified": {"memory.oom.group": "1", "memory.high": "100663296", "memory.min": "8388608", "memory.swap.max": "0"}}}'
	mkctr nolimit '["sleep", "3600"]' '{"resources": {"unified": {"memory.swap.max": "0"}}}'
	local since_ts
	since_ts=$(date +%s)
	lim=$(run_ctr limited)
	nol=$(run_ctr nolimit)
	cg=$(cg_of "$lim")
	for f in memory.oom.group=1 memory.high=100663296 memory.min=8388608 memory.max=134217728 memory.swap.max=0; do
		want=${f#*=} got=$(cgfile "$cg" "${f%%=*}")
		say "limited: ${f%%=*} = $got (want $want)"
		[ "$got" = "$want" ] || bad="$bad ${f%%=*}=$got"
	done
	cg=$(cg_of "$nol")
	got=$(cgfile "$cg" memory.swap.max)
	say "nolimit: memory.swap.max = $got (want 0), memory.max = $(cgfile "$cg" memory.max)"
	[ "$got" = 0 ] || bad="$bad nolimit:memory.swap.max=$got"
	if [ -n "$bad" ]; then
		journalctl -u cri-docker.service --since "@$since_ts" --no-pager -o cat 2>&1 | grep -i 'unified\|cgroup v2\|ignored' | sed 's/^/node:   cri-dockerd: /' | head -10
		fail "cgroup files differ:$bad"
	fi
}

# 4. OOM kills: memory.oom.group 1 ends the container (OOMKilled, 137); 0 kills only the
# biggest process (tail) and the container keeps running. The command does not end with tail:
# busybox sh execs the last command of -c, and tail as the container's PID 1 would end the
# container either way. tail starts once /tmp/go exists (crictl exec), after the cgroup files
# were read: the container can be gone a second after its start.
oom_kills() { local n; n=$(kv "/sys/fs/cgroup$1/memory.events" oom_kill 2>/dev/null) && [ "${n:-0}" -ge 1 ]; }
check_oom() {
	local grp one cg_grp cg_one st reason code n
	local cmd='["sh", "-c", "sleep 100000 & while [ ! -e /tmp/go ]; do sleep 0.2; done; tail /dev/zero; echo tail-gone; wait"]'
	mkctr group "$cmd" '{"resources": {"memory_limit_in_bytes": 67108864, "unified": {"memory.oom.group": "1", "memory.swap.max": "0"}}}'
	mkctr single "$cmd" '{"resources": {"memory_limit_in_bytes": 67108864, "unified": {"memory.oom.group": "0", "memory.swap.max": "0"}}}'
	grp=$(run_ctr group)
	one=$(run_ctr single)
	cg_grp=$(cg_of "$grp") cg_one=$(cg_of "$one")
	say "group: memory.oom.group=$(cgfile "$cg_grp" memory.oom.group) memory.max=$(cgfile "$cg_grp" memory.max) memory.swap.max=$(cgfile "$cg_grp" memory.swap.max)"
	say "single: memory.oom.group=$(cgfile "$cg_one" memory.oom.group) memory.max=$(cgfile "$cg_one" memory.max) memory.swap.max=$(cgfile "$cg_one" memory.swap.max)"
	local t_go
	t_go=$(date +%s)
	crictl exec -s "$grp" touch /tmp/go >/dev/null || fail "crictl exec group touch /tmp/go"
	crictl exec -s "$one" touch /tmp/go >/dev/null || fail "crictl exec single touch /tmp/go"
	local t=$SECONDS ok_grp=0 ok_one=0 end=$((SECONDS + 120))
	# Until the group container has exited (or had its OOM kill and is still there 10 s later)
	# and the single one has had its OOM kill.
	local grp_oom_at=
	while [ "$SECONDS" -lt "$end" ]; do
		if [ "$ok_grp" = 0 ]; then
			if is_state "$grp" CONTAINER_EXITED; then
				ok_grp=1
			elif [ -z "$grp_oom_at" ] && oom_kills "$cg_grp"; then
				grp_oom_at=$SECONDS
			elif [ -n "$grp_oom_at" ] && [ $((SECONDS - grp_oom_at)) -ge 10 ]; then
				ok_grp=2
			fi
		fi
		[ "$ok_one" = 1 ] || ! oom_kills "$cg_one" || ok_one=1
		[ "$ok_grp" = 0 ] || [ "$ok_one" = 0 ] || break
		sleep 1
	done
	IFS='|' read -r st reason code < <(crictl inspect -o go-template --template '{{.status.state}}|{{.status.reason}}|{{.status.exitCode}}' "$grp" 2>&1)
	say "group (oom.group 1): after $((SECONDS - t))s state $st, reason ${reason:-none}, exit code $code; docker OOMKilled=$(docker inspect -f '{{.State.OOMKilled}}' "$grp"); memory.events: $({ tr '\n' ' ' <"/sys/fs/cgroup$cg_grp/memory.events"; } 2>/dev/null || echo 'cgroup gone'); logs: $(crictl logs "$grp" 2>&1 | tr '\n' ' ')"
	# Docker 20.10 sets State.OOMKilled only when containerd's TaskOOM comes before the task's
	# exit; a later one is only its "oom" event. Docker's events for the container, in order:
	say "group: Docker's events since the trigger: $(docker events --since "$((t_go - 1))" --until "$(($(date +%s) + 2))" --filter "container=$grp" --format '{{.Action}}' 2>&1 | tr '\n' ' ')"
	n=$(kv "/sys/fs/cgroup$cg_one/memory.events" oom_kill 2>/dev/null || echo gone)
	sleep 1
	local st1
	st1=$(state_of "$one")
	say "single (oom.group 0): oom_kill=$n, state $st1, logs: $(crictl logs "$one" 2>&1 | tr '\n' ' '), processes: $(tr '\n' ' ' <"/sys/fs/cgroup$cg_one/cgroup.procs" 2>/dev/null)"
	local bad=
	# Docker learns of an OOM from containerd's TaskOOM event; when the whole group is killed
	# that event can come after the exit (seen once beside make test's host tests, load 8), and
	# Docker then says OOMKilled=false, so the CRI reason is Error. The kernel's log says
	# whether the kill was the OOM killer's in this container's cgroup: then the group ended
	# the container, which is what memory.oom.group=1 is for, and the missed reason is Docker's.
	if [ "$st" = CONTAINER_EXITED ] && [ "$code" = 137 ] && [ "$reason" != OOMKilled ] &&
		dmesg | grep "oom-kill:.*oom_memcg=[^,]*$grp" >/dev/null; then
		say "note: the kernel's OOM killer ended the group container (dmesg: oom_memcg names it), but Docker reported OOMKilled=false: its TaskOOM came after the exit"
		reason=OOMKilled
	fi
	[ "$st" = CONTAINER_EXITED ] && [ "$reason" = OOMKilled ] && [ "$code" = 137 ] ||
		bad="group container: state $st reason ${reason:-none} exit $code, want CONTAINER_EXITED OOMKilled 137;"
	[ "$ok_one" = 1 ] && [ "$st1" = CONTAINER_RUNNING ] ||
		bad="$bad single container: oom_kill ${n}, state $st1, want >=1 and CONTAINER_RUNNING"
	[ -z "$bad" ] || fail "$bad"
}

# 5. Stats under load against the cgroup files.
usage_ns() { echo $(($(kv "/sys/fs/cgroup$1/cpu.stat" usage_usec) * 1000)); }
ws_file() { echo $(($(cat "/sys/fs/cgroup$1/memory.current") - $(kv "/sys/fs/cgroup$1/memory.stat" inactive_file))); }
# within A B TOL: |A - B| <= TOL
within() { local d=$(($1 - $2)); [ "${d#-}" -le "$3" ]; }
# measure READ CMD...: runs CMD (a crictl stats call) between reads of READ (eval'ed) and sets
# JSON (its output), LO and HI (the reads that bracket its sample) and BRACKET (a description).
# A first call marks the sample it gets seen; a call a second or more later gets a new one
# (docs/cgroups.md), read between the two reads around it, unless the background loop took a
# sample meanwhile, never given out yet, which is returned as it is: then it was taken after
# the read before the first call. The sample's cpu timestamp tells which.
measure() {
	local read=$1 r0 r1 r2 t1 t2 ts
	shift
	r0=$(eval "$read")
	"$@" >/dev/null 2>&1 || true
	sleep 1.1
	t1=$(date +%s%N) r1=$(eval "$read")
	JSON=$("$@" 2>&1) || fail "$*: $JSON"
	r2=$(eval "$read") t2=$(date +%s%N)
	ts=$(printf '%s' "$JSON" | tr -d ' \n' | grep -o '"cpu":{"timestamp":"[0-9]*"' | head -n1 | grep -o '[0-9][0-9]*' | tail -n1)
	HI=$r2
	if [ "${ts:-0}" -ge "$t1" ]; then
		LO=$r1 BRACKET="read before $r1, after $r2 (the sample at +$(((ts - t1) / 1000000)) ms of the $(((t2 - t1) / 1000000)) ms between the reads)"
	else
		LO=$r0 BRACKET="read before the first call $r0, before this one $r1, after $r2 (a background sample, $(((t1 - ${ts:-0}) / 1000000)) ms before the read before this call)"
	fi
}
check_stats() {
	local pod burn hog cg_b cg_h bad='' id name cg got wsf wsg
	mkctr burner '["sh", "-c", "while :; do :; done"]' '{"resources": {"cpu_period": 100000, "cpu_quota": 50000}}'
	# 48 MiB into the pod's /dev/shm (tmpfs, charged to the writer) with a 32 MiB limit and
	# 96 MiB of swap (memory_swap_limit_in_bytes is memory + swap): about 16 MiB go to swap.
	mkctr holder '["sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 2>&1; echo filled; exec sleep 100000"]' \
		'{"resources": {"memory_limit_in_bytes": 33554432, "memory_swap_limit_in_bytes": 134217728}}'
	# A pod of its own: the pod's sums are checked against its containers, and the other checks
	# run at the same time add and remove containers in the pass's pod.
	POD_FILE=$W/pod.$CK
	mkpod stats 0c3d2b1a-0000-4000-8000-0000000000s5
	runp stats
	pod=$(pod_id)
	burn=$(run_ctr burner)
	hog=$(run_ctr holder)
	cg_b=$(cg_of "$burn") cg_h=$(cg_of "$hog")
	filled() { crictl logs "$hog" 2>&1 | grep '^filled' >/dev/null; }
	wait_for 90 filled || fail "holder did not fill /dev/shm within 90 s: $(crictl logs "$hog" 2>&1 | tail -3)"
	say "holder: $(crictl logs "$hog" 2>&1 | grep -v '^filled' | tail -n1 | tr '\n' ' ') memory.max=$(cgfile "$cg_h" memory.max) memory.swap.max=$(cgfile "$cg_h" memory.swap.max) memory.current=$(cgfile "$cg_h" memory.current) memory.swap.current=$(cgfile "$cg_h" memory.swap.current)"
	say "burner: cpu.max=$(cgfile "$cg_b" cpu.max)"
	for id in "$burn" "$hog"; do
		[ "$id" = "$burn" ] && name=burner cg=$cg_b || name=holder cg=$cg_h
		# shellcheck disable=SC2016 # expanded by measure's eval
		measure 'usage_ns "$cg"' crictl stats -o json "$id"
		wsf=$(ws_file "$cg")
		got=$(jval "$JSON" usageCoreNanoSeconds)
		say "$name cpu: usageCoreNanoSeconds $got; cpu.stat usage_usec*1000 $BRACKET; usageNanoCores $(jval "$JSON" usageNanoCores) (cpu.max $(cgfile "$cg" cpu.max))"
		[ -n "$got" ] && [ "$got" -ge "$LO" ] && [ "$got" -le "$HI" ] || bad="$bad $name: usageCoreNanoSeconds ${got:-none} not in [$LO, $HI];"
		wsg=$(jval "$JSON" workingSetBytes)
		say "$name memory: workingSetBytes $wsg; memory.current - inactive_file $wsf (diff $((${wsg:-0} - wsf))); usageBytes $(jval "$JSON" usageBytes) vs memory.current $(cgfile "$cg" memory.current); rssBytes $(jval "$JSON" rssBytes) vs anon $(kv "/sys/fs/cgroup$cg/memory.stat" anon)"
		[ -n "$wsg" ] && within "$wsg" "$wsf" $((4 << 20)) || bad="$bad $name: workingSetBytes ${wsg:-none} vs $wsf;"
		local swg swf
		swg=$(jval "$JSON" swapUsageBytes) swf=$(cgfile "$cg" memory.swap.current)
		say "$name swap: swapUsageBytes ${swg:-not reported}; memory.swap.current $swf"
		[ -n "$swg" ] && within "$swg" "$swf" $((4 << 20)) || bad="$bad $name: swapUsageBytes ${swg:-none} vs $swf;"
		case "$(printf '%s' "$JSON" | tr -d ' \n')" in
		*'"io":{'*) say "$name io: $(printf '%s' "$JSON" | tr -d ' \n' | grep -o '"io":{.*' | head -c 300); io.pressure: $(tr '\n' ' ' <"/sys/fs/cgroup$cg/io.pressure" 2>&1)" ;;
		*) say "$name io: not reported (the CRI's IoUsage carries PSI only); io.pressure: $(head -n1 "/sys/fs/cgroup$cg/io.pressure" 2>&1)" ;;
		esac
	done
	# Pod stats: the sums of the cgroups of the sandbox and of the pod's containers.
	local cgs=("$(cg_of "$pod")" "$cg_b" "$cg_h") c
	sum_usage() { local c n=0; for c in "${cgs[@]}"; do n=$((n + $(usage_ns "$c"))); done; echo "$n"; }
	# A container's sample just given is given again for a second (stats' statsMaxAge), and
	# would be older than the bracket's first read: past it, statsp samples each anew.
	sleep 1.2
	measure sum_usage crictl statsp -o json "$pod"
	wsf=0
	for c in "${cgs[@]}"; do wsf=$((wsf + $(ws_file "$c"))); done
	got=$(jval "$JSON" usageCoreNanoSeconds) wsg=$(jval "$JSON" workingSetBytes)
	say "pod cpu (sandbox, burner, holder): usageCoreNanoSeconds $got; sum of usage_usec*1000 $BRACKET"
	say "pod memory: workingSetBytes $wsg; sum of memory.current - inactive_file $wsf (diff $((${wsg:-0} - wsf)))"
	[ -n "$got" ] && [ "$got" -ge "$LO" ] && [ "$got" -le "$HI" ] || bad="$bad pod: usageCoreNanoSeconds ${got:-none} not in [$LO, $HI];"
	[ -n "$wsg" ] && within "$wsg" "$wsf" $((6 << 20)) || bad="$bad pod: workingSetBytes ${wsg:-none} vs $wsf;"
	[ -z "$bad" ] || fail "stats differ from the cgroup files:$bad"
}

# 6. AppArmor: the runtime default, a loaded localhost profile, an unloaded one.
check_apparmor() {
	local pod c1 c2 c3 got out
	if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" != Y ]; then
		say "AppArmor is not enabled in this kernel"
		exit 3
	fi
	cat >"$W/crid-test.aa" <<'EOF'
abi <abi/3.0>,
profile crid-test flags=(attach_disconnected,mediate_deleted) {
  file,
  network,
  capability,
  signal,
  ptrace,
  mount,
  umount,
  pivot_root,
  unix,
}
EOF
	out=$(apparmor_parser -r "$W/crid-test.aa" 2>&1) || fail "apparmor_parser -r: $out"
	grep -q '^crid-test ' /sys/kernel/security/apparmor/profiles || fail "crid-test not in /sys/kernel/security/apparmor/profiles"
	mkctr default '["sleep", "3600"]' '{"security_context": {"apparmor": {"profile_type": 0}}}'
	mkctr local '["sleep", "3600"]' '{"security_context": {"apparmor": {"profile_type": 2, "localhost_ref": "crid-test"}}}'
	mkctr absent '["sleep", "3600"]' '{"security_context": {"apparmor": {"profile_type": 2, "localhost_ref": "crid-absent"}}}'
	c1=$(run_ctr default)
	got=$(cat "/proc/$(pid_of "$c1")/attr/current")
	say "RuntimeDefault: attr/current \"$got\" (docker SecurityOpt $(docker inspect -f '{{.HostConfig.SecurityOpt}} AppArmorProfile={{.AppArmorProfile}}' "$c1"))"
	[ "$got" = "docker-default (enforce)" ] || fail "RuntimeDefault: attr/current '$got', want 'docker-default (enforce)'"
	c2=$(run_ctr local)
	got=$(cat "/proc/$(pid_of "$c2")/attr/current")
	say "Localhost crid-test: attr/current \"$got\""
	[ "$got" = "crid-test (enforce)" ] || fail "Localhost crid-test: attr/current '$got', want 'crid-test (enforce)'"
	pod_id >/dev/null
	if c3=$(crictl create "$(pod_id)" "$W/ctr.absent.json" "$(cut -d' ' -f2 "$POD_FILE")" 2>"$W/err.$CK"); then
		echo "$c3" >>"$W/ctrs.$CK"
		say "Localhost crid-absent (not loaded): crictl create succeeded (${c3:0:12})"
		if crictl start "$c3" >/dev/null 2>"$W/err.$CK"; then
			fail "Localhost crid-absent (not loaded): the container started: attr/current '$(cat "/proc/$(pid_of "$c3")/attr/current" 2>&1)'"
		fi
		say "Localhost crid-absent (not loaded): crictl start failed: $(cat "$W/err.$CK")"
	else
		say "Localhost crid-absent (not loaded): crictl create failed: $(cat "$W/err.$CK")"
	fi
}

# 7. A standalone kubelet v1.37.2 with its defaults and a static pod.
check_kubelet() {
	if [ ! -x "$VM_IN/kubelet" ]; then
		say "no kubelet binary given"
		exit 3
	fi
	[ -x /usr/local/bin/kubelet ] || install -m 0755 "$VM_IN/kubelet" /usr/local/bin/kubelet
	mkdir -p /etc/kubernetes/manifests /var/lib/kubelet
	# Only what standalone needs: no cgroupDriver (taken from our RuntimeConfig), failCgroupV1
	# and memorySwap at their defaults; failSwapOn: false because this node has swap (what
	# users with swap must set).
	cat >/etc/kubernetes/kubelet.yaml <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
EOF
	local t0=$SECONDS since_ts
	since_ts=$(date +%s)
	systemctl reset-failed crid-kubelet.service >/dev/null 2>&1 || true
	systemd-run --quiet --unit=crid-kubelet --property=Restart=no /usr/local/bin/kubelet \
		--config=/etc/kubernetes/kubelet.yaml --container-runtime-endpoint=$sock "${KUBELET_ARGS[@]}" ||
		fail "systemd-run kubelet"
	klog() { journalctl -u crid-kubelet.service --since "@$since_ts" --no-pager -o cat 2>&1; }
	kubelet_diag() {
		echo "node:   kubelet's warnings and errors, and what it killed (last 25):"
		klog | awk '!/^I/ || /Killing|SyncLoop|[Ss]andbox|[Pp]robe/' | tail -25 | cut -c1-400 | sed 's/^/node:   kubelet: /'
		echo "node:   crictl ps -a / pods:"
		{ crictl ps -a; crictl pods; } 2>&1 | sed 's/^/node:   /'
	}
	DIAG=kubelet_diag
	kfail() { fail "$@"; }
	# The probes' timeoutSeconds and periods: an exec probe (ExecSync: Docker's exec create,
	# start and inspect, and runc exec) takes more than the default 1 s under TCG, and the
	# kubelet then restarts the container for a failed liveness probe; probes every 2-3 s kept
	# the guest's CPUs so busy that one exec took over 20 s.
	cat >/etc/kubernetes/manifests/static.yaml <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: static
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: $BUSYBOX
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; touch /tmp/ok; echo hello from the static pod; while :; do sleep 1; done"]
    readinessProbe:
      exec:
        command: ["sh", "-c", "cat /tmp/ok && echo ready >>/tmp/probed"]
      periodSeconds: 4
      timeoutSeconds: 30
    livenessProbe:
      exec:
        command: ["cat", "/tmp/ok"]
      periodSeconds: 8
      timeoutSeconds: 30
EOF
	local ctr=
	app_running() { ctr=$(crictl ps -q --name '^app$' --label io.kubernetes.pod.name=static-crid-vm --state running 2>/dev/null) && [ -n "$ctr" ]; }
	# Until it runs, or the kubelet has failed to create its sandbox twice (then say why).
	sandbox_failing() { [ "$(klog | grep -c 'Failed to create sandbox for pod')" -ge 2 ]; }
	wait_for 240 eval 'app_running || sandbox_failing' || kfail "the static pod's container is not running within 240 s of the kubelet's start: $(crictl ps -a 2>&1 | tail -3 | tr '\n' ' ')"
	app_running || kfail "the kubelet cannot create the static pod's sandbox ($((SECONDS - t0))s after its start): $(klog | grep -o 'Failed to create sandbox for pod.*' | head -n1 | cut -c1-600)"
	ctr=$(crictl ps -q --name '^app$' --label io.kubernetes.pod.name=static-crid-vm --state running)
	say "static pod's container ${ctr:0:12} running $((SECONDS - t0))s after the kubelet's start"
	say "kubelet: $(klog | grep -o 'Using cgroup driver setting received from the CRI runtime.*' | head -n1)"
	# grep without -q in pipes: with pipefail, grep -q leaving early can fail the pipeline
	# through the writer's SIGPIPE when the output is longer than a pipe's buffer.
	klog | grep "Using cgroup driver setting received from the CRI runtime\" cgroupDriver=\"$DRIVER\"" >/dev/null ||
		kfail "the kubelet log does not say it took cgroup driver $DRIVER from the CRI"
	probed() { [ "$(crictl exec -s "$ctr" cat /tmp/probed 2>/dev/null | grep -c ready)" -ge 2 ]; }
	wait_for 180 probed || kfail "fewer than 2 successful readiness probes within 180 s: $(crictl exec -s "$ctr" cat /tmp/probed 2>&1 | grep -c ready)"
	local attempt fails cg logs te
	attempt=$(crictl inspect -o go-template --template '{{.status.metadata.attempt}}' "$ctr")
	fails=$(klog | grep -c 'Probe failed' || true)
	te=$EPOCHREALTIME
	crictl exec -s "$ctr" true >/dev/null || kfail "crictl exec -s true"
	say "probes: $(crictl exec -s "$ctr" cat /tmp/probed | grep -c ready) successful readiness probes; restart attempt $attempt; 'Probe failed' in the kubelet log: $fails; a crictl exec -s true takes $(since "$te")s here"
	[ "$attempt" = 0 ] || kfail "the container was restarted (attempt $attempt)"
	logs=$(crictl logs "$ctr" 2>&1)
	say "crictl logs: $logs"
	[ "$logs" = "hello from the static pod" ] || kfail "crictl logs: '$logs'"
	cg=$(cg_of "$ctr")
	say "container cgroup $cg: memory.oom.group=$(cgfile "$cg" memory.oom.group) memory.swap.max=$(cgfile "$cg" memory.swap.max) memory.max=$(cgfile "$cg" memory.max) memory.high=$(cgfile "$cg" memory.high)"
	local bad=
	case "$cg" in /kubepods*) ;; *) bad="$bad cgroup $cg is not under the kubelet's /kubepods;" ;; esac
	[ "$(cgfile "$cg" memory.oom.group)" = 1 ] || bad="$bad memory.oom.group $(cgfile "$cg" memory.oom.group), want 1;"
	[ "$(cgfile "$cg" memory.swap.max)" = 0 ] || bad="$bad memory.swap.max $(cgfile "$cg" memory.swap.max), want 0;"
	# Removal: the kubelet stops the pod; its container GC (every minute) removes the containers.
	local t1=$SECONDS
	rm -f /etc/kubernetes/manifests/static.yaml
	gone() { [ -z "$(crictl pods -q --label io.kubernetes.pod.name=static-crid-vm 2>/dev/null)" ] && [ -z "$(docker ps -aq --filter name=k8s_)" ]; }
	wait_for 180 gone || kfail "180 s after the manifest's removal: pods $(crictl pods --label io.kubernetes.pod.name=static-crid-vm 2>&1 | tail -n +2 | tr '\n' ' '); docker: $(docker ps -a --filter name=k8s_ --format '{{.Names}} {{.Status}}' | tr '\n' ' ')"
	say "manifest removed: pod gone and no k8s_ containers left after $((SECONDS - t1))s"
	systemctl stop crid-kubelet.service
	say "kubelet's warnings and errors: $(klog | grep -c '^[EW]') lines; first: $(klog | awk '/^[EW]/ && n++ < 3' | cut -c1-220 | tr '\n' '|')"
	[ -z "$bad" ] || fail "the kubelet's container:$bad"
}

# ---- main ----

say "script started at uptime $(uptime_s)s"
phase swap setup_swap
phase docker setup_docker
phase cri-dockerd setup_crid
for DRIVER in $DRIVERS; do
	case $DRIVER in
	systemd) WANT_RC=SYSTEMD ;;
	cgroupfs) WANT_RC=CGROUPFS ;;
	*) fail "unknown driver $DRIVER" ;;
	esac
	docker_driver_is "$DRIVER" || phase switch switch_driver "$DRIVER"
	run_check runtime-config check_runtime_config
	run_check cgroup-parent check_cgroup_parent
	# The pass's pod for the next checks, if cgroup-parent left none (it failed, or was not run).
	(
		set -e
		CK=pod pod_id >/dev/null
	) || say "no pod for the next checks; they will each try to run one"
	run_parallel unified:check_unified oom:check_oom stats:check_stats apparmor:check_apparmor
	# The kubelet removes the pods it does not know: none may be left.
	phase cleanup cleanup_pods
	case " $KUBELET_DRIVERS " in
	*" $DRIVER "*) run_check kubelet check_kubelet ;;
	*) printf '%-9s %-18s %-4s\n' "$DRIVER" kubelet SKIP >"$W/res.$DRIVER.kubelet" && say "[$DRIVER] kubelet: SKIP (not in NODE_KUBELET_DRIVERS)" ;;
	esac
done

# Last, since it turns on Docker's experimental mode (its checkpoints): CRIU (Debian's criu in
# the image) dumps a running container into the kubelet's archive.
enable_checkpoints() {
	systemctl stop cri-docker.service cri-docker.socket
	printf '{"exec-opts":["native.cgroupdriver=%s"],"experimental":true}\n' "$DRIVER" >/etc/docker/daemon.json
	systemctl restart docker.service || fail "systemctl restart docker"
	# shellcheck disable=SC2016 # expanded by the bash -c
	wait_for 180 bash -c '[ "$(docker info -f "{{.ExperimentalBuild}}" 2>/dev/null)" = true ]' || fail "docker not experimental within 180 s"
	systemctl start cri-docker.socket cri-docker.service || fail "systemctl start cri-docker"
	wait_for 120 runtime_ready || fail "cri-dockerd not ready within 120 s"
	mkdir -p /var/lib/kubelet/checkpoints
	say "docker experimental: $(docker info -f '{{.ExperimentalBuild}}'), $(criu --version 2>&1 | head -n1)"
}
check_checkpoint() {
	local c tarball list n
	command -v criu >/dev/null || { say "no criu in the image"; exit 3; }
	# shellcheck disable=SC2016 # expanded by the container's shell
	mkctr counter '["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i >/tmp/count; sleep 0.2; done"]'
	c=$(run_ctr counter)
	sleep 2
	tarball=/var/lib/kubelet/checkpoints/checkpoint-counter-$DRIVER.tar
	crictl checkpoint --export "$tarball" "$c" >/dev/null 2>"$W/err.$CK" || fail "crictl checkpoint: $(tail -c 600 "$W/err.$CK")"
	list=$(tar -tf "$tarball") || fail "tar -tf $tarball"
	say "archive $(du -h "$tarball" | cut -f1): $(printf '%s\n' "$list" | grep -c '^checkpoint/.*\.img$') CRIU images; $(printf '%s\n' "$list" | grep -v '^checkpoint/' | tr '\n' ' ')"
	for want in config.dump spec.dump rootfs-diff.tar checkpoint/inventory.img; do
		printf '%s\n' "$list" | grep -x "$want" >/dev/null || fail "archive lacks $want"
	done
	tar -xOf "$tarball" rootfs-diff.tar | tar -t | grep -x 'tmp/count' >/dev/null || fail "rootfs-diff.tar lacks tmp/count (the container's write)"
	tar -xOf "$tarball" config.dump | grep "\"id\": \"$c" >/dev/null || fail "config.dump does not name ${c:0:12}: $(tar -xOf "$tarball" config.dump)"
	is_state "$c" CONTAINER_RUNNING || fail "the container is $(state_of "$c") after the checkpoint, want still running"
	n=$(crictl exec "$c" cat /tmp/count 2>&1)
	sleep 1
	[ "$(crictl exec "$c" cat /tmp/count 2>&1)" != "$n" ] || fail "the container's loop stopped after the checkpoint (count $n)"
	rm -f "$tarball"
}
case " $CHECKS " in
*" checkpoint "*)
	phase experimental enable_checkpoints
	run_check checkpoint check_checkpoint
	;;
esac

say "=== summary (uptime $(uptime_s)s, script $(since "$T_START")s)"
for r in "${TIMES[@]}"; do say "time    $r"; done
FAILED=0
for d in $DRIVERS; do
	for c in runtime-config cgroup-parent unified oom stats apparmor kubelet checkpoint; do
		[ -f "$W/res.$d.$c" ] || continue
		say "check   $(cat "$W/res.$d.$c")"
		case "$(cat "$W/res.$d.$c")" in *" FAIL "*) FAILED=$((FAILED + 1)) ;; esac
	done
done
if [ "$FAILED" -gt 0 ]; then
	say "FAIL: $FAILED check(s) failed"
	exit 1
fi
say PASS
