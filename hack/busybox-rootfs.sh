#!/usr/bin/env bash
# Usage: busybox-rootfs.sh DEST
#
# Builds a minimal busybox root filesystem in DEST, for test images made with `docker import`
# (no registry is reachable from CI). It uses Debian's dynamically linked `busybox` package, not
# `busybox-static`: the static build runs applets inside the shell instead of exec'ing
# /bin/<applet>, which breaks tests that mask or replace /bin/ls. So the glibc libraries it
# needs are copied alongside, at their host paths. Idempotent; DEST may already exist.
set -euo pipefail

[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 DEST" >&2; exit 2; }
DEST=$1
# Outside the checkout, so reruns and fresh clones stay offline-fast.
CACHE=/var/cache/cri-dockerd-ci

mkdir -p "$CACHE"
# latest_deb: the newest busybox .deb in the cache, or nothing.
latest_deb() { find "$CACHE" -maxdepth 1 -name 'busybox_*.deb' | sort -V | tail -n 1; }
deb=$(latest_deb)
if [[ -z $deb ]]; then
  dl=$(mktemp -d "$CACHE/dl.XXXXXX")
  # _apt does the download when it can write the directory; otherwise apt warns and runs as root.
  chown _apt "$dl" 2>/dev/null || true
  if ! (cd "$dl" && apt-get download -q busybox); then
    # A fresh machine may have no package lists yet.
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    (cd "$dl" && apt-get download -q busybox)
  fi
  mv "$dl"/busybox_*.deb "$CACHE"/
  rm -rf "$dl"
  deb=$(latest_deb)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work"
bb=$work/bin/busybox
[[ -x $bb ]] || { echo "$0: no bin/busybox in $deb" >&2; exit 1; }

mkdir -p "$DEST"/{bin,etc,dev,proc,sys,root,run,var/tmp,tmp}
chmod 1777 "$DEST/tmp" "$DEST/var/tmp"
install -m 0755 "$bb" "$DEST/bin/busybox"

# Shared libraries and the dynamic loader, at the paths the binary will look them up
# (e.g. /lib/x86_64-linux-gnu/libc.so.6 and /lib64/ld-linux-x86-64.so.2); symlinks resolved.
ldd "$bb" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do
    mkdir -p "$DEST$(dirname "$lib")"
    cp -fL "$lib" "$DEST$lib"
  done

# Every applet as /bin/<applet> -> busybox, so `sleep`, `ls`, ... are files that exec busybox.
# One perl process (perl-base is Essential in Debian) instead of ~260 forks of ln.
"$bb" --list | (cd "$DEST/bin" && perl -nle 'next if $_ eq "busybox"; unlink; symlink("busybox", $_) or die "$_: $!"')

cat >"$DEST/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$DEST/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
# Docker bind-mounts its own versions over these; they only need to exist.
: >"$DEST/etc/hosts"
: >"$DEST/etc/resolv.conf"
: >"$DEST/etc/hostname"
