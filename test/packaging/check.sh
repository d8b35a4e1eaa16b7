#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Checks the release artifacts `make release` wrote into dist/ (`make release-test` builds them
# first): SHA256SUMS and the tgz layout, the ELF architecture of every binary, the packaged unit
# files (systemd-analyze verify, which must also reject broken units), the rpm metadata, and the
# amd64 .deb installed with apt into a fresh Debian 12 root (debootstrap), where apt satisfies
# its Docker dependency with docker.io. Then upgrade, removal, reinstall and purge in that root.
# The root is cached as a tarball in /var/cache/cri-dockerd-ci (built once, under a minute);
# each run extracts a new copy and removes it. Needs root. Idempotent on a fresh Debian 12.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
DIST=$REPO/dist
CACHE=${CRI_DOCKERD_CI_CACHE:-/var/cache/cri-dockerd-ci}
SUITE=bookworm
# Bump when the recipe of the cached root changes.
ROOT_TARBALL=$CACHE/debian-$SUITE-minbase-docker.io-r1.tar.gz

# shellcheck source=../lib/common.sh
. "$REPO/test/lib/common.sh"
LOG_PREFIX=release-test
# log lines carry the seconds since the start.
LOG_STAMP=elapsed
fail() { log "FAIL: $*"; exit 1; }
trap 'log "FAIL: command failed at line $LINENO"' ERR

[[ $(id -u) == 0 ]] || fail "needs root (debootstrap, chroot)"
[[ -s $DIST/SHA256SUMS ]] || fail "no $DIST/SHA256SUMS: run make release first"

# Host tools: debootstrap, rpm (queries and extracts the .rpm files), systemd-analyze.
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v rpm >/dev/null || need+=(rpm)
command -v rpm2archive >/dev/null || need+=(rpm2cpio)
command -v systemd-analyze >/dev/null || need+=(systemd)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

WORK=$(mktemp -d /var/tmp/cri-dockerd-release-test.XXXXXX)
cleanup() {
  # Nothing is mounted into the chroot; --one-file-system guards against surprises anyway.
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

# The version everything must carry: the one in the tgz names (no leading v).
shopt -s nullglob
tgzs=("$DIST"/cri-dockerd-*.amd64.tgz)
((${#tgzs[@]} == 1)) || fail "expected one cri-dockerd-VERSION.amd64.tgz in $DIST, found ${#tgzs[@]}"
VERSION=${tgzs[0]##*/cri-dockerd-}
VERSION=${VERSION%.amd64.tgz}
[[ $VERSION != v* ]] || fail "version $VERSION in the tgz name has a leading v"
log "version $VERSION"

# 1. SHA256SUMS covers every artifact and matches.
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || fail "sha256sum -c SHA256SUMS"
expected=$(for a in amd64 arm64; do
  r=$([[ $a == amd64 ]] && echo x86_64 || echo aarch64)
  printf '%s\n' "cri-dockerd-$VERSION.$a.tgz" "cri-dockerd_${VERSION}_$a.deb" "cri-dockerd-$VERSION-1.$r.rpm"
done | sort)
[[ $(awk '{print $2}' "$DIST/SHA256SUMS") == "$expected" ]] ||
  fail "SHA256SUMS lists $(awk '{print $2}' "$DIST/SHA256SUMS" | tr '\n' ' '), want ${expected//$'\n'/ }"
[[ $(find "$DIST" -mindepth 1 -maxdepth 1 ! -name '.*' ! -name SHA256SUMS -printf '%f\n' | sort) == "$expected" ]] || fail "dist/ holds files SHA256SUMS does not list"
log "SHA256SUMS: $(wc -l < "$DIST/SHA256SUMS") artifacts, all match"

# elf_machine FILE: x86-64 or aarch64, from the ELF header (e_machine at offset 18, little
# endian; 0x3e and 0xb7), so no file(1) or binutils is needed.
elf_machine() {
  local h
  h=$(od -An -tx1 -N20 "$1" | tr -d ' \n')
  [[ ${h:0:8} == 7f454c46 ]] || { echo "not-ELF"; return; }
  [[ ${h:8:2} == 02 ]] || { echo "not-64-bit"; return; }
  case ${h:36:4} in 3e00) echo x86-64 ;; b700) echo aarch64 ;; *) echo "machine-${h:36:4}" ;; esac
}

# 2. Per arch: tgz layout, binary architecture, and the same binary in the tgz, .deb and .rpm.
for arch in amd64 arm64; do
  want=$([[ $arch == amd64 ]] && echo x86-64 || echo aarch64)
  rarch=$([[ $arch == amd64 ]] && echo x86_64 || echo aarch64)
  tgz=$DIST/cri-dockerd-$VERSION.$arch.tgz deb=$DIST/cri-dockerd_${VERSION}_$arch.deb
  rpmf=$DIST/cri-dockerd-$VERSION-1.$rarch.rpm
  [[ $(tar tzf "$tgz") == $'cri-dockerd/\ncri-dockerd/cri-dockerd' ]] ||
    fail "$tgz lists $(tar tzf "$tgz" | tr '\n' ' '), want exactly cri-dockerd/ cri-dockerd/cri-dockerd"
  x=$WORK/x-$arch
  mkdir -p "$x/tgz" "$x/deb" "$x/rpm"
  tar xzf "$tgz" -C "$x/tgz"
  dpkg-deb -x "$deb" "$x/deb"
  # rpm2archive, not rpm2cpio | cpio: nfpm's cpio payload has absolute names (cpio would write
  # to / unless told otherwise) and a size field that makes rpm2cpio exit 1.
  rpm2archive - <"$rpmf" | tar xz -C "$x/rpm"
  got=$(elf_machine "$x/tgz/cri-dockerd/cri-dockerd")
  [[ $got == "$want" ]] || fail "$tgz: binary is $got, want $want"
  sum=$(sha256sum < "$x/tgz/cri-dockerd/cri-dockerd")
  [[ $(sha256sum < "$x/deb/usr/bin/cri-dockerd") == "$sum" ]] || fail "$deb: /usr/bin/cri-dockerd differs from the tgz's"
  [[ $(sha256sum < "$x/rpm/usr/bin/cri-dockerd") == "$sum" ]] || fail "$rpmf: /usr/bin/cri-dockerd differs from the tgz's"
  [[ $(dpkg-deb -f "$deb" Architecture) == "$arch" ]] || fail "$deb: Architecture $(dpkg-deb -f "$deb" Architecture)"
  [[ $(dpkg-deb -f "$deb" Depends) == "docker.io | docker-ce | moby-engine" ]] || fail "$deb: Depends $(dpkg-deb -f "$deb" Depends)"
  log "$arch: tgz layout ok, $want ELF, same binary in tgz, deb and rpm"
done

# 3. The packaged units: verified by systemd-analyze in the extracted package root (with the
# host's targets and slices, which the units' default dependencies need), where ExecStart's
# /usr/bin/cri-dockerd exists. Any message counts as a failure: systemd only warns about an
# unknown key. The check must also catch broken units, or it proves nothing.
VROOT=$WORK/x-amd64/deb
cp -a /lib/systemd/system/*.target /lib/systemd/system/*.slice "$VROOT/lib/systemd/system/"
verify() { # verify ROOT: no output and exit 0
  local out
  if ! out=$(systemd-analyze verify --root="$1" cri-docker.service cri-docker.socket 2>&1) || [[ -n $out ]]; then
    echo "$out" >&2
    return 1
  fi
}
verify "$VROOT" || fail "systemd-analyze verify of the packaged units"
grep -qx 'ExecStart=/usr/bin/cri-dockerd --container-runtime-endpoint fd://' "$VROOT/lib/systemd/system/cri-docker.service" ||
  fail "packaged cri-docker.service: ExecStart is not /usr/bin/cri-dockerd"
diff <(sed 's|/usr/local/bin/cri-dockerd|/usr/bin/cri-dockerd|' packaging/systemd/cri-docker.service) \
  "$VROOT/lib/systemd/system/cri-docker.service" >&2 || fail "packaged cri-docker.service differs from packaging/systemd/ beyond ExecStart's path"
cmp -s packaging/systemd/cri-docker.socket "$VROOT/lib/systemd/system/cri-docker.socket" || fail "packaged cri-docker.socket differs"
u=$VROOT/lib/systemd/system/cri-docker.service
cp "$u" "$WORK/good.service"
sed -i 's|^ExecStart=/usr/bin/|ExecStart=/usr/local/bin/|' "$u"   # the unit as `make install` has it
if verify "$VROOT" 2>/dev/null; then fail "systemd-analyze verify accepts an ExecStart that does not exist"; fi
cp "$WORK/good.service" "$u" && sed -i 's|^KillMode=|KilMode=|' "$u"  # a typo: only a warning
if verify "$VROOT" 2>/dev/null; then fail "verify accepts an unknown key"; fi
cp "$WORK/good.service" "$u"
log "units: systemd-analyze verify clean; it rejects a missing ExecStart binary and an unknown key"

# 4. rpm metadata: epoch 3 as upstream's spec (else 3:0.4.3 would sort above us), the Docker
# dependency, no config files, the file list, and version ordering against upstream.
for rarch in x86_64 aarch64; do
  rpmf=$DIST/cri-dockerd-$VERSION-1.$rarch.rpm
  q() { rpm -qp --nosignature "$@" "$rpmf" 2>/dev/null; }
  [[ $(q --qf '%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE} %{ARCH}') == "cri-dockerd 3:$VERSION-1 $rarch" ]] ||
    fail "$rpmf: $(q --qf '%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE} %{ARCH}')"
  [[ $(q --requires) == /usr/bin/dockerd ]] || fail "$rpmf requires $(q --requires | tr '\n' ' ')"
  [[ -z $(q -c) ]] || fail "$rpmf marks config files: $(q -c)"
  files=$(q -l)
  for f in /usr/bin/cri-dockerd /usr/lib/systemd/system/cri-docker.service /usr/lib/systemd/system/cri-docker.socket \
    /usr/share/doc/cri-dockerd/README.md /usr/share/doc/cri-dockerd/docs/packages.md /usr/share/licenses/cri-dockerd/LICENSE; do
    grep -qx "$f" <<<"$files" || fail "$rpmf lacks $f"
  done
  [[ $(q -L) == /usr/share/licenses/cri-dockerd/LICENSE ]] || fail "$rpmf: license files $(q -L)"
  for s in postin preun postun; do
    script=$(q --qf "%{${s^^}}")
    [[ -n $script && $script != '(none)' ]] || fail "$rpmf has no %$s script"
    sh -n <<<"$script" || fail "$rpmf: %$s is not valid sh"
  done
  rpm -K --nosignature "$rpmf" >/dev/null || fail "$rpmf: digests"
done
# rpm itself accepts the package: installed into an empty root (no scripts: there is no shell).
rroot=$WORK/rpmroot
rpm --root "$rroot" --initdb
rpm --root "$rroot" -i --force-debian --nodeps --noscripts --nosignature "$DIST/cri-dockerd-$VERSION-1.x86_64.rpm" ||
  fail "rpm -i of the x86_64 rpm into an empty root"
[[ -x $rroot/usr/bin/cri-dockerd && -f $rroot/usr/lib/systemd/system/cri-docker.socket ]] || fail "rpm -i put no binary or units"
rpm --root "$rroot" -V --nodeps cri-dockerd || fail "rpm -V after installing into an empty root"
rpmcmp() { rpm --eval "%{lua: print(rpm.ver('$1') > rpm.ver('$2') and 'gt' or 'le')}"; }
for up in 3:0.4.3-3.el8 3:0.4.3-3.fc36 3:0.4.99-3; do
  [[ $(rpmcmp "3:$VERSION-1" "$up") == gt ]] || fail "rpm sorts 3:$VERSION-1 below upstream's $up"
done
log "rpm: 3:$VERSION-1 > upstream 3:0.4.3-3.el8, requires /usr/bin/dockerd, no config files; rpm -i into an empty root and rpm -V pass"
for up in 0.4.3 0.4.3.3-0.debian-bookworm 0.4.3~3-0~debian-bookworm 0.4.99; do
  dpkg --compare-versions "$VERSION" gt "$up" || fail "dpkg sorts $VERSION below upstream's $up"
done
log "deb: $VERSION > upstream 0.4.3 and 0.4.3.3-0.debian-bookworm (dpkg --compare-versions)"

# 5. A fresh Debian 12 root. Cached: debootstrap minbase, apt lists, and docker.io's packages
# downloaded (not installed), so that apt resolves our dependency in every run, offline.
mirror() { # the host's Debian mirror, from deb822 or one-line sources
  local m
  m=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $m ]] || m=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}
if [[ ! -s $ROOT_TARBALL ]]; then
  mkdir -p "$CACHE"
  exec 9>"$ROOT_TARBALL.lock"
  flock 9
  if [[ ! -s $ROOT_TARBALL ]]; then
    m=$(mirror)
    log "building the cached Debian $SUITE root from $m (once)"
    b=$WORK/build-root
    debootstrap --variant=minbase "$SUITE" "$b" "$m" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
    # A chroot must never start services (docker.io's init script would start a dockerd here).
    printf '#!/bin/sh\nexit 101\n' >"$b/usr/sbin/policy-rc.d"
    chmod 0755 "$b/usr/sbin/policy-rc.d"
    chroot "$b" apt-get update -q >/dev/null
    chroot "$b" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --download-only docker.io >/dev/null
    tar czf "$ROOT_TARBALL.tmp" -C "$b" --numeric-owner .
    mv "$ROOT_TARBALL.tmp" "$ROOT_TARBALL"
    rm -rf --one-file-system "$b"
  fi
  exec 9>&-
fi
R=$WORK/root
mkdir "$R"
tar xzf "$ROOT_TARBALL" -C "$R" --numeric-owner
log "fresh Debian $SUITE root from $ROOT_TARBALL"

DEB=cri-dockerd_${VERSION}_amd64.deb
cp "$DIST/$DEB" "$R/tmp/"
in_root() { chroot "$R" env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
# apt picks docker.io for "docker.io | docker-ce | moby-engine" and installs it with ours; the
# maintainer scripts run without a running systemd, as in any chroot or image build.
in_root apt-get install -y -q --no-install-recommends "/tmp/$DEB" >"$WORK/apt.log" 2>&1 ||
  { tail -30 "$WORK/apt.log" >&2; fail "apt-get install ./$DEB in the Debian root"; }
# shellcheck disable=SC2016 # ${...} is a dpkg-query field, not shell
log "installed $DEB with apt, and docker.io $(in_root dpkg-query -W -f='${Version}' docker.io) for its dependency" \
  "($(grep -c '^Get:.*http' "$WORK/apt.log" || true) packages downloaded; the cached root has them)"

# shellcheck disable=SC2016 # ${...} is a dpkg-query field, not shell
status() { in_root dpkg-query -W -f='${Status}' cri-dockerd 2>/dev/null || true; }
WANTS=$R/etc/systemd/system/sockets.target.wants/cri-docker.socket
check_installed() {
  [[ $(status) == "install ok installed" ]] || fail "cri-dockerd is '$(status)' after $1 (a maintainer script failed?)"
  [[ -x $R/usr/bin/cri-dockerd ]] || fail "no /usr/bin/cri-dockerd after $1"
  local v
  v=$(in_root /usr/bin/cri-dockerd --version) || fail "cri-dockerd --version failed in the root"
  # One of the words it prints is exactly the version (upstream's form: "cri-dockerd 0.4.3 (hash)").
  tr -s ' \t' '\n' <<<"$v" | grep -qxF -- "$VERSION" || fail "cri-dockerd --version prints '$v', want version $VERSION"
  # shellcheck disable=SC2016 # ${...} is a dpkg-query field, not shell
  [[ $(in_root dpkg-query -W -f='${Version}' cri-dockerd) == "$VERSION" ]] ||
    fail "package version $(in_root dpkg-query -W -f='${Version}' cri-dockerd), binary $VERSION"
  for f in /lib/systemd/system/cri-docker.service /lib/systemd/system/cri-docker.socket \
    /usr/share/doc/cri-dockerd/README.md /usr/share/doc/cri-dockerd/docs/packages.md \
    /usr/share/doc/cri-dockerd/docs/install.md /usr/share/doc/cri-dockerd/LICENSE /usr/share/doc/cri-dockerd/copyright; do
    [[ -s $R$f ]] || fail "$f missing after $1"
  done
  grep -q 'Apache License' "$R/usr/share/doc/cri-dockerd/LICENSE" || fail "LICENSE is not the Apache license"
  # shellcheck disable=SC2016 # ${...} is a dpkg-query field, not shell
  [[ -z $(in_root dpkg-query -W -f='${Conffiles}' cri-dockerd) ]] || fail "the deb marks conffiles"
}
enabled() { [[ -L $WANTS && $(readlink "$WANTS") == /lib/systemd/system/cri-docker.socket ]]; }

[[ ! -d $R/run/systemd/system ]] || fail "the Debian root looks like a running systemd"
check_installed "the first install"
enabled || fail "cri-docker.socket is not enabled after the first install ($WANTS)"
log "first install: binary prints $VERSION, units, docs, license in place; socket enabled"

# An upgrade (reinstalling the package goes through the same prerm upgrade / postinst configure
# OLD_VERSION path) keeps an admin's choice: enabled stays enabled, disabled stays disabled.
in_root dpkg -i "/tmp/$DEB" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "upgrade"; }
check_installed "an upgrade"
enabled || fail "an upgrade disabled cri-docker.socket"
rm "$WANTS" # what systemctl disable cri-docker.socket does
in_root dpkg -i "/tmp/$DEB" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "upgrade"; }
[[ ! -e $WANTS ]] || fail "an upgrade re-enabled the socket the admin disabled"
log "upgrade: keeps the socket enabled, and keeps it disabled when the admin disabled it"

# Removal disables the socket and removes the files; an install after it enables it again;
# purge leaves nothing of deb-systemd-helper's state behind.
in_root dpkg -i "/tmp/$DEB" >/dev/null 2>&1 # (still disabled, see above)
in_root dpkg -r cri-dockerd >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -r"; }
for f in /usr/bin/cri-dockerd /lib/systemd/system/cri-docker.service /lib/systemd/system/cri-docker.socket; do
  [[ ! -e $R$f ]] || fail "$f left after dpkg -r"
done
in_root dpkg -i "/tmp/$DEB" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "reinstall"; }
check_installed "a reinstall"
enabled || fail "cri-docker.socket not enabled after remove + install"
in_root dpkg -r cri-dockerd >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -r"; }
[[ ! -e $WANTS && ! -L $WANTS ]] || fail "dpkg -r left the socket enabled"
in_root dpkg -P cri-dockerd >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -P"; }
[[ -z $(status) || $(status) == "unknown ok not-installed" ]] || fail "after purge the package is '$(status)'"
left=$(find "$R/var/lib/systemd/deb-systemd-helper-enabled" "$R/etc/systemd/system" -name 'cri-docker*' 2>/dev/null || true)
[[ -z $left ]] || fail "purge left $left"
log "remove disables the socket, reinstall enables it, purge leaves nothing"
log "PASS"
