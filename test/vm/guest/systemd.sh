#!/bin/bash
# Our .deb under systemd for real, run inside the guest by test/vm/systemd.sh, in one boot: an
# older .deb of ours installed with apt, a pod run by it, the upgrade to this checkout's .deb with
# apt (the pod keeps running, the socket stays enabled, the service runs the new binary), crictl
# through socket activation, our unit started while Docker is down (it must not fail for good),
# reinstall and purge. Inputs in $VM_IN: the new .deb, old/ with the old .deb, crictl, the pause
# and busybox image tars, a pod and a container config. Each phase prints its time (SECONDS).
set -euo pipefail

fail() {
	echo "systemd: FAIL: $*"
	systemctl status --no-pager cri-docker.service cri-docker.socket docker.service 2>&1 | tail -40 || true
	journalctl -u cri-docker.service --no-pager 2>&1 | tail -40 || true
	exit 1
}
# step: a result, with the seconds since its phase began.
timings=()
phase_start=$SECONDS
step() { echo "systemd: [+$((SECONDS - phase_start))s] $*"; }
# phase NAME: ends the phase NAME, prints its time and keeps it for the summary.
phase() {
	local took=$((SECONDS - phase_start))
	timings+=("$1 ${took}s")
	echo "systemd: -- $1: ${took} s"
	phase_start=$SECONDS
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
apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/tmp/apt.log 2>&1 || {
		cat /tmp/apt.log
		fail "apt-get install $*"
	}
}
# crictl's endpoints in its config, which it otherwise warns it looks for on every call.
printf 'runtime-endpoint: unix:///var/run/cri-dockerd.sock\nimage-endpoint: unix:///var/run/cri-dockerd.sock\ntimeout: 20\n' >/etc/crictl.yaml
# crictl from the guest's disk: /bed is 9p without a page cache, so each run from there reads
# its 40 MB again through the share.
install -m 0755 "$VM_IN/crictl" /usr/local/bin/crictl
crictl() { /usr/local/bin/crictl "$@"; }
# condition TYPE: crictl info's condition TYPE as one line without spaces (its fields in any order).
condition() { crictl info 2>/dev/null | tr -d ' \n' | grep -o "{[^{}]*\"$1\"[^{}]*}"; }
# runtime_ready: the RuntimeReady condition of crictl info is true.
runtime_ready() { condition RuntimeReady | grep -q '"status":true'; }
installed() { dpkg-query -W -f '${Version}' cri-dockerd; }
main_pid() { systemctl show -p MainPID --value cri-docker.service; }
# running_version: the version of the binary the service runs (its /proc/PID/exe, which names
# a file dpkg replaced as "... (deleted)").
running_version() {
	local pid exe
	pid=$(main_pid)
	[ "$pid" != 0 ] || return 1
	exe=$(readlink "/proc/$pid/exe")
	case "$exe" in *deleted*) echo "deleted:$exe" && return 0 ;; esac
	"/proc/$pid/exe" --version | head -n1 | cut -d' ' -f2
}
# same_pod: crictl lists the pod and its container as before, and the container kept its pid.
same_pod() {
	[ "$(crictl pods -q --state ready)" = "$pod" ] || fail "$1: pods $(crictl pods -q | tr '\n' ' '), want $pod"
	[ "$(crictl ps -q --state running)" = "$ctr" ] || fail "$1: containers $(crictl ps -q -a | tr '\n' ' '), want $ctr"
	[ "$(docker inspect -f '{{.State.Pid}}' "$ctr")" = "$ctr_pid" ] || fail "$1: the container was restarted"
}

wait_for 300 docker info || fail "docker not ready 300 s after the script started"
docker load -i "$VM_IN/pause.tar" >/dev/null
docker load -i "$VM_IN/busybox.tar" >/dev/null
step "docker $(docker version --format '{{.Server.Version}}') ready, images loaded"
phase docker

# The old .deb, enabled and serving a pod.
old_deb=$(ls "$VM_IN"/old/cri-dockerd_*.deb)
new_deb=$(ls "$VM_IN"/cri-dockerd_*.deb)
old_v=$(dpkg-deb -f "$old_deb" Version)
new_v=$(dpkg-deb -f "$new_deb" Version)
apt_install "$old_deb"
[ "$(installed)" = "$old_v" ] || fail "installed $(installed), want the old $old_v"
systemctl enable --now cri-docker.socket >/dev/null 2>&1 || fail "systemctl enable --now cri-docker.socket"
wait_for 120 runtime_ready || fail "the old version: runtime not ready within 120 s"
[ "$(running_version)" = "$old_v" ] || fail "the service runs $(running_version), want the old $old_v"
old_pid=$(main_pid)
# The kubelet makes the pod's log directory; crictl does not.
mkdir -p /var/log/pods/vm-pod
pod=$(crictl runp "$VM_IN/pod.json") || fail "crictl runp"
ctr=$(crictl create "$pod" "$VM_IN/container.json" "$VM_IN/pod.json") || fail "crictl create"
crictl start "$ctr" >/dev/null || fail "crictl start"
ctr_pid=$(docker inspect -f '{{.State.Pid}}' "$ctr")
same_pod "the old version"
step "old $old_v installed with apt, socket enabled, ready; pod ${pod:0:12} and container ${ctr:0:12} running (pid $ctr_pid, cgroup $(cut -d: -f3 "/proc/$ctr_pid/cgroup"))"
phase old

# The upgrade: apt-get install of the new .deb over the old one.
apt_install "$new_deb"
[ "$(installed)" = "$new_v" ] || fail "installed $(installed) after the upgrade, want $new_v"
grep -qF "Unpacking cri-dockerd ($new_v) over ($old_v)" /tmp/apt.log || {
	cat /tmp/apt.log
	fail "apt did not upgrade $old_v to $new_v"
}
systemctl is-enabled --quiet cri-docker.socket || fail "the socket is not enabled after the upgrade"
systemctl is-active --quiet cri-docker.socket || fail "the socket is not active after the upgrade"
wait_for 120 runtime_ready || fail "not ready within 120 s of the upgrade"
[ "$(main_pid)" != "$old_pid" ] || fail "the service was not restarted by the upgrade (pid $old_pid)"
[ "$(running_version)" = "$new_v" ] || fail "the service runs $(running_version) after the upgrade, want $new_v"
version=$(crictl version 2>&1) || fail "crictl version after the upgrade: $version"
case "$version" in *"RuntimeName:  docker"*"RuntimeApiVersion:  v1"*) ;; *) fail "crictl version after the upgrade: $version" ;; esac
same_pod "after the upgrade"
step "upgraded $old_v -> $new_v with apt: socket still enabled, the service runs the new binary (pid $old_pid -> $(main_pid)); the pod and its container kept running, listed the same"
phase upgrade

# The socket alone: the service starts on the first connection. (The socket is PartOf the
# service, as upstream's: stopping the service stops the socket too, so start the socket again.)
systemctl stop cri-docker.service cri-docker.socket
systemctl start cri-docker.socket
systemctl is-active --quiet cri-docker.service && fail "cri-docker.service active before any connection"
wait_for 120 runtime_ready || {
	crictl info 2>&1 | head -30 || true
	fail "crictl info through the socket: runtime not ready within 120 s"
}
systemctl is-active --quiet cri-docker.service || fail "cri-docker.service not started by socket activation"
step "crictl info through socket activation: RuntimeReady; cri-docker.service $(systemctl is-active cri-docker.service)"
# The kernel's OOM killer picks a container before the runtime (the unit's OOMScoreAdjust).
oom=$(cat "/proc/$(main_pid)/oom_score_adj")
[ "$oom" = -999 ] || fail "cri-dockerd's oom_score_adj is $oom, want the unit's -999"
step "cri-dockerd runs with oom_score_adj $oom"
driver=$(crictl runtime-config 2>/dev/null | tr -d ' \n' || true)
step "RuntimeConfig: ${driver:-none reported}"
case "$driver" in *SYSTEMD*) ;; *) fail "RuntimeConfig does not say systemd: '$driver'" ;; esac
same_pod "after the service stopped and was socket-activated again"
step "the pod and its container kept running across the stop and the activation, listed the same"
# The new version stops and removes the pod the old one made.
crictl stopp "$pod" >/dev/null || fail "crictl stopp of the old version's pod"
crictl rmp "$pod" >/dev/null || fail "crictl rmp of the old version's pod"
[ -z "$(crictl pods -q)" ] || fail "pods left after rmp: $(crictl pods -q)"
[ -z "$(docker ps -aq)" ] || fail "containers left after rmp: $(docker ps -a)"
step "the old version's pod stopped and removed"
phase socket-activation

# Docker down when our unit starts: the unit stays up, not ready, and is ready once Docker is.
systemctl stop cri-docker.service
systemctl stop docker.socket docker.service
systemctl start cri-docker.service || fail "cri-docker.service does not start while Docker is down"
sleep 5
systemctl is-active --quiet cri-docker.service || fail "cri-docker.service not active 5 s after starting with Docker down"
# crictl checks the connection with Version first: the standby gate answers it (Docker's
# version "unknown"), so that crictl info gets to Status, which says why the runtime is not ready.
version=$(crictl version 2>&1) || fail "crictl version with Docker down: $version"
case "$version" in *"RuntimeName:  docker"*"RuntimeVersion:  unknown"*"RuntimeApiVersion:  v1"*) ;; *) fail "crictl version with Docker down: $version" ;; esac
runtime=$(condition RuntimeReady) || fail "crictl info with Docker down: $(crictl info 2>&1 | head -c 600)"
case "$runtime" in *'"status":false'*) ;; *) fail "RuntimeReady with Docker down: $runtime" ;; esac
case "$runtime" in *'"reason":"DockerDaemonNotReady"'*) ;; *) fail "RuntimeReady's reason with Docker down: $runtime" ;; esac
network=$(condition NetworkReady) || fail "crictl info with Docker down has no NetworkReady"
case "$network" in *'"status":false'*'"reason":"DockerDaemonNotReady"'* | *'"reason":"DockerDaemonNotReady"'*'"status":false'*) ;; *) fail "NetworkReady with Docker down: $network" ;; esac
if crictl pods -q >/tmp/pods.log 2>&1; then fail "crictl pods answered with Docker down: $(cat /tmp/pods.log)"; fi
grep -q "Unavailable" /tmp/pods.log || fail "crictl pods with Docker down: $(cat /tmp/pods.log), want Unavailable"
message=$(crictl info 2>/dev/null | grep -m1 '"message"' | sed 's/^ *"message": *//; s/,$//' || true)
step "cri-docker.service active with Docker down; crictl version: RuntimeVersion unknown; crictl info: RuntimeReady false, reason DockerDaemonNotReady, message $message; NetworkReady false, the same; crictl pods: Unavailable"
systemctl start docker.service || fail "systemctl start docker"
wait_for 180 runtime_ready || fail "not ready within 180 s of Docker's start"
step "Docker started: RuntimeReady, without restarting our unit ($(systemctl show -p NRestarts --value cri-docker.service) restarts)"
phase docker-down

apt_install --reinstall "$new_deb"
systemctl is-enabled --quiet cri-docker.socket || fail "the socket is not enabled after a reinstall"
wait_for 120 runtime_ready || fail "not ready after a reinstall"
step "reinstalled: socket still enabled, runtime ready"
phase reinstall

DEBIAN_FRONTEND=noninteractive apt-get purge -y -q cri-dockerd >/tmp/apt.log 2>&1 || {
	cat /tmp/apt.log
	fail "apt-get purge"
}
left=$(dpkg -L cri-dockerd 2>/dev/null || true; ls /usr/bin/cri-dockerd /lib/systemd/system/cri-docker.* /usr/lib/systemd/system/cri-docker.* 2>/dev/null || true)
[ -z "$left" ] || fail "left after purge: $left"
systemctl is-active --quiet cri-docker.socket && fail "cri-docker.socket still active after purge"
step "purged: nothing left"
phase purge
step "timings: ${timings[*]} (script ${SECONDS} s)"
echo "systemd: PASS"
