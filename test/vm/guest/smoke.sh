#!/bin/bash
# The VM test bed's first proof, run inside the guest by run.sh (from smoke.sh): this is a node as
# users run it (systemd PID 1, cgroup v2, Docker's systemd cgroup driver) and Docker runs a
# container from an image loaded from a tar. Prints the guest's timings (seconds since boot).
set -euo pipefail

fail() {
	echo "smoke: FAIL: $*"
	exit 1
}
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# systemd's own record of when the real root's systemd started (microseconds since boot).
t_systemd=$(systemctl show -p UserspaceTimestampMonotonic --value)
t_systemd=$(awk -v u="$t_systemd" 'BEGIN { printf "%.1f", u / 1e6 }')
t_start=$(uptime_s)

pid1=$(ps -o comm= -p 1)
[ "$pid1" = systemd ] || fail "PID 1 is $pid1, not systemd"
echo "smoke: PID 1 is systemd ($(systemctl --version | head -n1)); kernel $(uname -r)"

fs=$(stat -fc %T /sys/fs/cgroup)
[ "$fs" = cgroup2fs ] || fail "/sys/fs/cgroup is $fs, not cgroup2fs"
echo "smoke: /sys/fs/cgroup is cgroup2 (controllers: $(cat /sys/fs/cgroup/cgroup.controllers))"

# Docker starts with the boot (docker.service, enabled by the package); wait for it, bounded.
for _ in $(seq 1 300); do
	docker info >/dev/null 2>&1 && break
	sleep 1
done
docker info >/dev/null 2>&1 || {
	systemctl status --no-pager docker.service containerd.service || true
	fail "docker not ready 300 s after the script started"
}
t_docker=$(uptime_s)
driver=$(docker info --format '{{.CgroupDriver}} {{.CgroupVersion}}')
[ "$driver" = "systemd 2" ] || fail "docker info: cgroup driver and version '$driver', want 'systemd 2'"
echo "smoke: docker $(docker version --format '{{.Server.Version}}'): cgroup driver systemd, cgroup version 2"

# The image: a static busybox, made into an image from a tar (no registry is reachable).
t_run0=$(uptime_s)
docker import "$VM_IN/busybox-rootfs.tar" crid-vm/busybox:smoke >/dev/null
msg=$(docker run --rm crid-vm/busybox:smoke /bin/busybox echo "hello from a container")
[ "$msg" = "hello from a container" ] || fail "docker run printed '$msg'"
echo "smoke: docker run --rm: $msg"
t_run1=$(uptime_s)

# The container's cgroup is a systemd scope: the systemd driver is really in use.
id=$(docker run -d crid-vm/busybox:smoke /bin/busybox sleep 60)
pid=$(docker inspect -f '{{.State.Pid}}' "$id")
cg=$(cat "/proc/$pid/cgroup")
docker rm -f "$id" >/dev/null
case "$cg" in
"0::/system.slice/docker-$id.scope") echo "smoke: the container's cgroup: ${cg#0::}" ;;
*) fail "the container's cgroup is '$cg', want 0::/system.slice/docker-$id.scope" ;;
esac

awk -v s="$t_systemd" -v a="$t_start" -v d="$t_docker" -v r0="$t_run0" -v r1="$t_run1" 'BEGIN {
	printf "smoke: timing: boot to systemd %.1fs, to this script %.1fs, docker ready %.1fs (after boot), import+run %.1fs\n", s, a, d, r1 - r0
}'
echo "smoke: PASS"
