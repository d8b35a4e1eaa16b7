#!/usr/bin/env bash
# Builds (once) the Debian 12 guest image of the VM test bed and prints the directory that holds
# it: disk.img (raw ext4 root, never written by run.sh: it boots copy-on-write overlays of it),
# vmlinuz and initrd.img (qemu boots them directly, so the image needs no boot loader) and
# busybox-rootfs.tar (a tiny container root for `docker import`; no image registry is reachable).
#
# Usage: test/vm/image.sh [--rebuild]
# Env:   VM_CACHE (default /var/cache/cri-dockerd-ci/vm), VM_MIRROR (default Debian's),
#        VM_LOCK_WAIT (seconds to wait for another build, default 1800).
#
# "Offline" here means no image registry: debootstrap and apt-get download use Debian's mirror.
set -euo pipefail

# The cache key. Bump IMAGE_VERSION whenever PACKAGES or the guest configuration below change:
# a new key builds a new image, and older keys are deleted.
IMAGE_VERSION=3
SUITE=bookworm
KEY="debian-${SUITE}-v${IMAGE_VERSION}"

# systemd-sysv: systemd is PID 1, as on users' nodes. docker.io brings containerd and runc;
# apparmor: Debian's kernel enables AppArmor and Docker refuses to start containers without
# apparmor_parser. udev+kmod: devices and the 9p/overlay modules. iptables: Docker's bridge
# network. containernetworking-plugins: the CNI plugins cri-dockerd's pods use (a later step).
# criu: Docker's checkpoints (CheckpointContainer), which node.sh's checkpoint check runs.
# apt (in minbase) installs our .deb from a local file: `apt-get install -y "$VM_IN/cri-dockerd_*.deb"`
# (its only dependency, docker.io, is here, so no network is needed in the guest).
PACKAGES=linux-image-amd64,systemd-sysv,udev,kmod,iproute2,procps,ca-certificates,apparmor,docker.io,containerd,runc,iptables,containernetworking-plugins,criu
# The guest root's size (a sparse file: the host stores only what is written).
DISK_SIZE=8G

CACHE=${VM_CACHE:-/var/cache/cri-dockerd-ci/vm}
MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}
LOCK_WAIT=${VM_LOCK_WAIT:-1800}
rebuild=0
case "${1:-}" in
--rebuild) rebuild=1 ;;
"") ;;
*)
	echo "usage: $0 [--rebuild]" >&2
	exit 2
	;;
esac

[ "$(id -u)" = 0 ] || {
	echo "image.sh: needs root (debootstrap, mkfs.ext4 -d of a root-owned tree)" >&2
	exit 1
}
for tool in debootstrap mkfs.ext4 apt-get dpkg-deb flock; do
	command -v "$tool" >/dev/null || {
		echo "image.sh: $tool not found (apt-get install debootstrap e2fsprogs)" >&2
		exit 1
	}
done

mkdir -p "$CACHE"
out="$CACHE/$KEY"
# One build at a time: a second run waits here, then finds the image built.
exec 9>"$CACHE/lock"
if ! flock -w "$LOCK_WAIT" 9; then
	echo "image.sh: another image.sh holds $CACHE/lock for more than ${LOCK_WAIT}s" >&2
	exit 1
fi

if [ "$rebuild" = 0 ] && [ -e "$out/.complete" ]; then
	echo "$out"
	exit 0
fi

start=$(date +%s)
part="$out.partial"
root="$part/root"

# debootstrap mounts proc and sys in the chroot; a failed or interrupted build must not leave them
# mounted (nor half an image that a later run would take for a built one).
cleanup() {
	local m
	for m in "$root/proc" "$root/sys" "$root/dev/pts" "$root/dev"; do
		if mountpoint -q "$m" 2>/dev/null; then umount -l "$m" || true; fi
	done
	rm -rf "$part"
}
trap cleanup EXIT
cleanup
mkdir -p "$root"

echo "image.sh: debootstrap $SUITE ($PACKAGES) into $root" >&2
nice -n 19 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" \
	>"$part/debootstrap.log" 2>&1 || {
	tail -n 30 "$part/debootstrap.log" >&2
	exit 1
}

# The guest configuration: files written into the root, no chroot needed.
echo crid-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 crid-vm\n::1 localhost\n' >"$root/etc/hosts"
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$root/etc/fstab"
# An empty machine-id: each boot of a fresh overlay gets its own.
: >"$root/etc/machine-id"
# Nothing on the console but the kernel, systemd and the test; no timers that would start apt or
# fstrim during a test.
for unit in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer \
	apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
	ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

# The runner: mounts the host's 9p share "bed" at /bed and runs /bed/guest.sh, which run.sh puts
# there on every run (so changing what runs in the guest needs no image rebuild). The unit powers
# the guest off however the runner ends; run.sh's timeout covers a runner that never ends.
cat >"$root/usr/local/sbin/crid-vm-runner" <<'RUNNER'
#!/bin/sh
mkdir -p /bed
modprobe -a 9pnet_virtio 9p 2>/dev/null || true
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 bed /bed; then
	echo "crid-vm-runner: cannot mount the 9p share 'bed'" >/dev/console
	exit 1
fi
exec /bin/bash /bed/guest.sh
RUNNER
chmod 755 "$root/usr/local/sbin/crid-vm-runner"
cat >"$root/etc/systemd/system/crid-vm-runner.service" <<'UNIT'
[Unit]
Description=cri-dockerd VM test bed: run the host's script
# Only the local root is needed; the script waits for whatever else it needs (docker.service).
After=local-fs.target systemd-modules-load.service
# However the runner ends (systemd 252: these belong in [Unit]).
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/crid-vm-runner
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/crid-vm-runner.service \
	"$root/etc/systemd/system/multi-user.target.wants/crid-vm-runner.service"

# What went in, for the record.
{
	echo "key=$KEY"
	echo "packages=$PACKAGES"
	echo "built=$(date -u +%FT%TZ)"
	# shellcheck disable=SC2016 # dpkg-query's own ${...} format, not the shell's
	chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' \
		linux-image-amd64 systemd docker.io containerd runc apparmor containernetworking-plugins
} >"$part/manifest.txt"

# The kernel and initrd boot from the host side (qemu -kernel/-initrd).
kernels=("$root"/boot/vmlinuz-*)
initrds=("$root"/boot/initrd.img-*)
if ! [ -e "${kernels[0]}" ] || ! [ -e "${initrds[0]}" ]; then
	echo "image.sh: no kernel or initrd in $root/boot" >&2
	exit 1
fi
cp "${kernels[-1]}" "$part/vmlinuz"
cp "${initrds[-1]}" "$part/initrd.img"

# Debootstrap's downloaded .debs are not needed in the guest.
rm -f "$root"/var/cache/apt/archives/*.deb

# A tiny container root: Debian's static busybox (from the mirror, like the rest).
bb="$part/busybox"
mkdir -p "$bb/deb" "$bb/rootfs/bin"
(cd "$bb/deb" && apt-get download busybox-static >/dev/null 2>&1) || {
	echo "image.sh: apt-get download busybox-static failed (apt-get update?)" >&2
	exit 1
}
dpkg-deb -x "$bb"/deb/busybox-static_*.deb "$bb/x"
cp "$bb/x/bin/busybox" "$bb/rootfs/bin/busybox"
ln -s busybox "$bb/rootfs/bin/sh"
tar -C "$bb/rootfs" --owner=0 --group=0 -cf "$part/busybox-rootfs.tar" .
rm -rf "$bb"

nice -n 19 truncate -s "$DISK_SIZE" "$part/disk.img"
nice -n 19 mkfs.ext4 -q -L crid-vm -E root_owner=0:0 -d "$root" "$part/disk.img"
rm -rf "$root"

end=$(date +%s)
echo "$((end - start))" >"$part/build-seconds"
touch "$part/.complete"

# Publish: drop an older image of this key and every other key's, then rename into place.
rm -rf "$out"
for old in "$CACHE"/debian-*; do
	[ -e "$old" ] || continue
	case "$old" in "$out.partial") continue ;; esac
	rm -rf "$old"
done
mv "$part" "$out"
trap - EXIT
echo "image.sh: built $out in $((end - start))s" >&2
echo "$out"
