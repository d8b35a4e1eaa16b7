#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Boots the VM test bed (a cgroup v2 Debian 12 node, systemd as PID 1, Docker's systemd cgroup
# driver) on a fresh copy-on-write overlay of image.sh's cached image, runs SCRIPT inside it as
# root, prints its output and exits with its exit code. The guest powers itself off when the
# script ends; the host kills qemu on every other way out (timeout, signal, error).
#
# Usage: test/vm/run.sh [options] SCRIPT [FILE|DIR ...]
#   SCRIPT runs under bash in the guest, in /bed/in, where the FILEs and DIRs are copied;
#   it may write results to $VM_OUT (/bed/out), which come back to the host (--out).
# Options:
#   --timeout SECS   kill the VM after SECS (default 900): SIGTERM, then SIGKILL 10 s later
#   --out DIR        copy the guest's $VM_OUT (output.log, rc, its own files) and console.log here
#   --env NAME=VAL   set NAME in the script's environment (repeatable)
#   --mem MB         guest memory (default 2048)      --smp N  guest CPUs (default 2)
#   --accel auto|kvm|tcg   default auto: KVM only where it boots Debian's kernel (see README)
#   --append ARGS    more kernel command line (e.g. "systemd.log_level=debug"; "loud" drops quiet)
#   --console        stream the guest's serial console to stderr while it runs
#   --keep           keep the work directory (overlay disk, share) and print its path
# Exit: the script's code; 124 on timeout; 125 when the guest ended without the script's code.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/common.sh
. "$here/../lib/common.sh"
LOG_PREFIX=run.sh
timeout=900
outdir=
mem=2048
smp=2
accel=auto
console=0
keep=0
append=
envs=()
usage() {
	sed -n '/^# Usage/,/^# Exit/p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) timeout=$2 && shift 2 ;;
	--out) outdir=$2 && shift 2 ;;
	--env) envs+=("$2") && shift 2 ;;
	--mem) mem=$2 && shift 2 ;;
	--smp) smp=$2 && shift 2 ;;
	--accel) accel=$2 && shift 2 ;;
	--append) append=$2 && shift 2 ;;
	--console) console=1 && shift ;;
	--keep) keep=1 && shift ;;
	--help | -h) usage ;;
	--) shift && break ;;
	-*) log "unknown option $1" && usage ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
script=$1
shift
[ -f "$script" ] || {
	log "no script $script"
	exit 2
}
case "$timeout" in '' | *[!0-9]*) log "--timeout takes seconds" && exit 2 ;; esac
for tool in qemu-system-x86_64 qemu-img setpriv; do
	command -v "$tool" >/dev/null || {
		log "$tool not found (apt-get install qemu-system-x86 qemu-utils)"
		exit 1
	}
done

# KVM: this CI machine's /dev/kvm is a paravirtual KVM (kvm_pvm) under which Debian's kernel
# hangs right after "Booting from ROM", so auto takes KVM only where /dev/kvm is usable and
# kvm_pvm is not loaded; elsewhere software emulation (TCG, about 100 s to docker ready).
if [ "$accel" = auto ]; then
	if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then accel=kvm; else accel=tcg; fi
fi
case "$accel" in
kvm) accel_args=(-accel kvm -cpu host) ;;
tcg) accel_args=(-accel "tcg,thread=multi") ;;
*) log "--accel auto|kvm|tcg" && exit 2 ;;
esac

img=$("$here/image.sh")

# A run killed with SIGKILL runs no trap (its qemu dies too: --pdeathsig below) and leaves its
# work directory: remove those of runs that are gone (not the --keep ones).
for d in "${TMPDIR:-/tmp}"/cri-dockerd-vm.*; do
	if [ ! -f "$d/pid" ] || [ -e "$d/keep" ]; then continue; fi
	kill -0 "$(cat "$d/pid")" 2>/dev/null || rm -rf "$d"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/cri-dockerd-vm.XXXXXX")
echo "$$" >"$work/pid"
name="cri-dockerd-vm-$$"
qpid=
# Stops qemu if it still runs: SIGTERM (qemu exits at once, like pulling the plug: the overlay is
# thrown away anyway), then SIGKILL if it is still there 10 s later; then reaps it.
stop_qemu() {
	stop_pid "$qpid" qemu 10
	qpid=
}
# shellcheck disable=SC2317 # run by the EXIT trap
on_exit() {
	local rc=$?
	stop_qemu
	if [ "$keep" = 1 ]; then
		: >"$work/keep"
		log "kept $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

share="$work/share"
mkdir -p "$share/in" "$share/out"
cp "$here/guest/guest.sh" "$share/guest.sh"
cp "$script" "$share/script"
for f in "$@"; do cp -a "$f" "$share/in/"; done
: >"$share/env"
for e in "${envs[@]}"; do printf '%q=%q\n' "${e%%=*}" "${e#*=}" >>"$share/env"; done
# The cached image stays clean: the guest writes to this overlay only.
qemu-img create -q -f qcow2 -F raw -b "$img/disk.img" "$work/overlay.qcow2"

if [ "$console" = 1 ]; then
	con=(-chardev "stdio,id=con,signal=off,logfile=$work/console.log")
else
	con=(-chardev "file,id=con,path=$work/console.log")
fi
log "booting $(basename "$img") ($accel, ${smp} CPUs, ${mem} MB, timeout ${timeout}s)"
# quiet: the console shows the kernel's errors, systemd's failures and the script's output.
quiet=quiet
case " $append " in *" loud "*) quiet= ;; esac
t0=$(date +%s.%N)
# nice: the host is shared. setpriv --pdeathsig: qemu dies with this shell even if the shell is
# SIGKILLed and no trap runs. -no-reboot: a guest panic (panic=-1) or reboot ends qemu.
# -nodefaults/-nic none: no VGA, no network; the guest reaches the host only through /bed (9p).
nice -n 19 setpriv --pdeathsig KILL qemu-system-x86_64 \
	-name "$name" "${accel_args[@]}" -m "$mem" -smp "$smp" \
	-nodefaults -display none -no-reboot -nic none \
	"${con[@]}" -serial chardev:con \
	-kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
	-append "root=/dev/vda rw console=ttyS0 panic=-1 $quiet $append" \
	-drive "file=$work/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe" \
	-virtfs "local,path=$share,mount_tag=bed,security_model=none,id=bed" \
	-device virtio-rng-pci \
	</dev/null >&2 &
qpid=$!

deadline=$((SECONDS + timeout))
timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
	if [ "$SECONDS" -ge "$deadline" ]; then
		log "timeout after ${timeout}s: stopping the VM"
		timed_out=1
		stop_qemu
		break
	fi
	sleep 1
done
qrc=0
if [ -n "$qpid" ]; then
	wait "$qpid" || qrc=$?
	qpid=
fi
t1=$(date +%s.%N)

rc=125
if [ "$timed_out" = 1 ]; then
	rc=124
elif [ -s "$share/out/rc" ]; then
	rc=$(cat "$share/out/rc")
fi
[ ! -f "$share/out/output.log" ] || cat "$share/out/output.log"
if [ "$timed_out" = 1 ] && [ -s "$share/out/rc" ]; then
	log "the script ended (exit $(cat "$share/out/rc")) but the guest did not power off"
elif [ "$rc" = 124 ] || [ "$rc" = 125 ]; then
	log "the guest did not finish the script (qemu exit $qrc); console's end:"
	tail -n 40 "$work/console.log" >&2 || true
fi
{
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "vm: wall %.1fs (qemu start to exit)\n", b - a }'
	if [ -f "$share/out/rc" ]; then
		awk -v a="$(date -r "$share/out/rc" +%s.%N)" -v b="$t1" \
			'BEGIN { printf "vm: power-off %.1fs (script end to qemu exit)\n", b - a }'
	fi
} | tee "$share/out/host-timings" >&2
if [ -n "$outdir" ]; then
	mkdir -p "$outdir"
	cp -a "$share/out/." "$outdir/"
	cp "$work/console.log" "$outdir/console.log"
fi
# Nothing of this run may stay behind on the host.
if pgrep -f -- "-name $name " >/dev/null; then
	log "qemu $name still running after the run"
	rc=1
fi
exit "$rc"
