#!/bin/bash
# Our .deb under systemd for real, run inside the guest by test/vm/systemd.sh: installed with
# apt, crictl through socket activation, a pod that keeps running across `systemctl restart
# cri-docker`, our unit started while Docker is down (it must not fail for good), reinstall and
# purge. Inputs in $VM_IN: the .deb, crictl, the pause and busybox image tars, a pod and a
# container config.
set -euo pipefail

fail() {
	echo "systemd: FAIL: $*"
	systemctl status --no-pager cri-docker.service cri-docker.socket docker.service 2>&1 | tail -40 || true
	journalctl -u cri-docker.service --no-pager 2>&1 | tail -40 || true
	exit 1
}
step() { echo "systemd: $*"; }
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
sock=unix:///var/run/cri-dockerd.sock
crictl() { "$VM_IN/crictl" --runtime-endpoint "$sock" --timeout 20s "$@"; }
# runtime_ready: the RuntimeReady condition of crictl info is true (its fields in any order).
runtime_ready() { crictl info 2>/dev/null | tr -d ' \n' | grep -o '{[^{}]*"RuntimeReady"[^{}]*}' | grep -c '"status":true' >/dev/null; }

wait_for 300 docker info || fail "docker not ready 300 s after the script started"
docker load -i "$VM_IN/pause.tar" >/dev/null
docker load -i "$VM_IN/busybox.tar" >/dev/null
step "docker $(docker version --format '{{.Server.Version}}') ready, images loaded"

deb=$(ls "$VM_IN"/cri-dockerd_*.deb)
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb" >/tmp/apt.log 2>&1 || {
	cat /tmp/apt.log
	fail "apt-get install $deb"
}
step "installed $(dpkg-query -W -f '${Package} ${Version}' cri-dockerd) with apt"
step "units: socket $(systemctl is-enabled cri-docker.socket 2>&1)/$(systemctl is-active cri-docker.socket 2>&1), service $(systemctl is-enabled cri-docker.service 2>&1)/$(systemctl is-active cri-docker.service 2>&1)"
systemctl enable --now cri-docker.socket >/dev/null 2>&1 || fail "systemctl enable --now cri-docker.socket"
systemctl is-active --quiet cri-docker.socket || fail "cri-docker.socket is not active"
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
driver=$(crictl runtime-config 2>/dev/null | tr -d ' \n' || true)
step "RuntimeConfig: ${driver:-none reported}"
case "$driver" in *SYSTEMD*) ;; *) fail "RuntimeConfig does not say systemd: '$driver'" ;; esac

# The kubelet makes the pod's log directory; crictl does not.
mkdir -p /var/log/pods/vm-pod
pod=$(crictl runp "$VM_IN/pod.json") || fail "crictl runp"
ctr=$(crictl create "$pod" "$VM_IN/container.json" "$VM_IN/pod.json") || fail "crictl create"
crictl start "$ctr" >/dev/null || fail "crictl start"
before_pods=$(crictl pods -q --state ready)
before_ctrs=$(crictl ps -q --state running)
if [ "$before_pods" != "$pod" ] || [ "$before_ctrs" != "$ctr" ]; then
	fail "pods '$before_pods', containers '$before_ctrs'; want $pod and $ctr"
fi
ctr_pid=$(docker inspect -f '{{.State.Pid}}' "$ctr")
step "pod ${pod:0:12} and container ${ctr:0:12} running (pid $ctr_pid, cgroup $(cut -d: -f3 "/proc/$ctr_pid/cgroup"))"

systemctl restart cri-docker.service || fail "systemctl restart cri-docker"
wait_for 120 runtime_ready || fail "not ready within 120 s of the restart"
[ "$(crictl pods -q --state ready)" = "$before_pods" ] || fail "pods after the restart: $(crictl pods -q)"
[ "$(crictl ps -q --state running)" = "$before_ctrs" ] || fail "containers after the restart: $(crictl ps -q -a)"
[ "$(docker inspect -f '{{.State.Pid}}' "$ctr")" = "$ctr_pid" ] || fail "the container was restarted"
step "systemctl restart cri-docker: the pod and its container kept running, listed the same"

# Docker down when our unit starts: the unit stays up, not ready, and is ready once Docker is.
systemctl stop cri-docker.service
systemctl stop docker.socket docker.service
systemctl start cri-docker.service || fail "cri-docker.service does not start while Docker is down"
sleep 5
systemctl is-active --quiet cri-docker.service || fail "cri-docker.service not active 5 s after starting with Docker down"
runtime_ready && fail "RuntimeReady while Docker is down"
# crictl checks the connection with Version first, which answers Unavailable until Docker is
# reached; so crictl info shows our message rather than Status.
out=$(crictl info 2>&1 || true)
case "$out" in
*"cri-dockerd is not serving yet: docker at unix:///var/run/docker.sock is not reachable"*) ;;
*) fail "crictl info with Docker down: $(printf '%s' "$out" | head -c 600)" ;;
esac
step "cri-docker.service active with Docker down; crictl info: Unavailable, cri-dockerd is not serving yet: docker ... is not reachable"
systemctl start docker.service || fail "systemctl start docker"
wait_for 180 runtime_ready || fail "not ready within 180 s of Docker's start"
step "Docker started: RuntimeReady, without restarting our unit ($(systemctl show -p NRestarts --value cri-docker.service) restarts)"
crictl stopp "$pod" >/dev/null || fail "crictl stopp"
crictl rmp "$pod" >/dev/null || fail "crictl rmp"

DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall "$deb" >/tmp/apt.log 2>&1 || {
	cat /tmp/apt.log
	fail "apt-get install --reinstall"
}
systemctl is-enabled --quiet cri-docker.socket || fail "the socket is not enabled after a reinstall"
wait_for 120 runtime_ready || fail "not ready after a reinstall"
step "reinstalled: socket still enabled, runtime ready"

DEBIAN_FRONTEND=noninteractive apt-get purge -y -q cri-dockerd >/tmp/apt.log 2>&1 || {
	cat /tmp/apt.log
	fail "apt-get purge"
}
left=$(dpkg -L cri-dockerd 2>/dev/null || true; ls /usr/bin/cri-dockerd /lib/systemd/system/cri-docker.* /usr/lib/systemd/system/cri-docker.* 2>/dev/null || true)
[ -z "$left" ] || fail "left after purge: $left"
systemctl is-active --quiet cri-docker.socket && fail "cri-docker.socket still active after purge"
step "purged: nothing left"
echo "systemd: PASS"
