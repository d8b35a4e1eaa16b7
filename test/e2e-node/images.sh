#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Offline stand-ins for the images the node e2e suite (Kubernetes v1.37.2) runs, under their
# exact names (test/utils/image/manifest.go), built from local files and pushed to the local
# registry that run.sh starts. Each stand-in has what the specs use of it:
#
#   e2e-test-images/busybox:1.37.0-2  upstream busybox 1.35.0 (build.sh: defconfig, dynamically
#                                     linked; every applet a hard link in /bin, as in the upstream
#                                     image), the users and groups of upstream busybox
#   e2e-test-images/agnhost:2.66.1    /agnhost built from test/images/agnhost of the same module
#   e2e-test-images/agnhost:2.55      (AgnhostPrev; its own image ID) with the busybox base, plus
#                                     what agnhost's Alpine base gives the specs: curl, bash,
#                                     netcat-openbsd's nc, ip, ss, dig, getent, Alpine 3.21's os-release
#                                     (the ImageVolume specs cat etc/os-release of kitten for
#                                     "Alpine Linux"); /agnhost-2, /uploads, porter's localhost.crt/.key,
#                                     user-defined-in-image (1000) in group-defined-in-image
#                                     (50000), /var/registry (fake-registry-server's pause:testing)
#   e2e-test-images/nginx:1.27.0-2    the critest nginx stand-in (test/critest/standins/
#   e2e-test-images/nginx:1.28.0-2    nginx.c): HTTP 200 on :80, /var/run/nginx.pid, process nginx
#   e2e-test-images/nonewprivs:1.4    setuid-root nnp (test/images/nonewprivs), CMD nnp
#   e2e-test-images/nonroot:1.5       busybox, USER 1234
#   e2e-test-images/glibc-dns-testing:2.1.1  busybox plus Debian's glibc hostname (hostname -f),
#                                     dig and getent (the DNS specs' glibc querier)
#   e2e-test-images/kitten:1.8        agnhost plus kitten.jpg/data.json (test/images/kitten),
#   e2e-test-images/nautilus:1.8      nautilus.jpg/data.json; CMD test-webserver
#   pause:3.10.2                      build/pause/linux/pause.c, USER 65535:65535, as upstream
#
# Usage: images.sh DOCKER_HOST BIN_DIR REGISTRY_URL
#   DOCKER_HOST   the dockerd to build and push with (run.sh's private one, which reaches the
#                 registry under the public names)
#   BIN_DIR       build.sh's output (agnhost, nonewprivs, pause, busybox)
#   REGISTRY_URL  the registry's own address (http://127.0.0.2), to check what it serves
# Idempotent: nothing is built when the stamp (a hash of the inputs) matches and the registry
# serves every name. FORCE=1 rebuilds. REGISTRY_DATA (the registry's storage directory) is
# emptied before a rebuild.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX="e2e-node images"
# K8S_VERSION: the module whose test/images sources the stand-ins use.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
[[ $# -eq 3 ]] || { echo "usage: $0 DOCKER_HOST BIN_DIR REGISTRY_URL" >&2; exit 2; }
DOCKER_HOST_ARG=$1 BIN=$2 REGISTRY_URL=$3
export DOCKER_BUILDKIT=0 # classic builder: FROM a local image, offline
docker() { /usr/bin/docker -H "$DOCKER_HOST_ARG" "$@"; }
CACHE=${E2E_CACHE:-/var/cache/cri-dockerd-ci}
STAMP=$CACHE/e2e-node/registry/pushed
K8S_SRC=$(cd "$HERE/k8s-build" && GOFLAGS=-mod=readonly go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -d $K8S_SRC/test/images ]] || die "no k8s.io/kubernetes source in the module cache"

E2E=registry.k8s.io/e2e-test-images
# "KIND NAME": one image per line, built in this order (agnhost needs pause pushed first).
IMAGES=(
  "pause registry.k8s.io/pause:3.10.2"
  "busybox $E2E/busybox:1.37.0-2"
  "agnhost $E2E/agnhost:2.66.1"
  "agnhost $E2E/agnhost:2.55"
  "nginx $E2E/nginx:1.27.0-2"
  "nginx $E2E/nginx:1.28.0-2"
  "nonewprivs $E2E/nonewprivs:1.4"
  "nonroot $E2E/nonroot:1.5"
  "glibc-dns $E2E/glibc-dns-testing:2.1.1"
  "kitten $E2E/kitten:1.8"
  "nautilus $E2E/nautilus:1.8"
)
# Host programs copied into images with the libraries they link (Debian's glibc builds). dig
# (bind9-dnsutils) and getent: what agnhost's Alpine base has (bind-tools, musl-utils) and the
# DNS conformance specs run in agnhost pods.
HOST_TOOLS=(/usr/bin/curl /usr/bin/bash /usr/sbin/ip /usr/bin/ss /usr/bin/hostname /usr/bin/dig /usr/bin/getent)

names() { local l; for l in "${IMAGES[@]}"; do echo "${l#* }"; done; }
# image_names: the image names, for run.sh to pull.
if [[ ${IMAGES_LIST_ONLY:-0} == 1 ]]; then names; exit 0; fi

manifest_url() { # NAME:TAG -> the registry URL of its manifest
  local ref=$1 path
  path=${ref#*/}
  echo "$REGISTRY_URL/v2/${path%:*}/manifests/${path##*:}"
}
all_present() {
  local n
  while read -r n; do
    curl -sf -o /dev/null -I --max-time 5 -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "$(manifest_url "$n")" || return 1
  done < <(names)
}

hash=$({
  cat "${BASH_SOURCE[0]}" "$ROOT/test/critest/standins/nginx.c" "$ROOT"/test/lib/busybox-etc/*
  sha256sum "$BIN/agnhost" "$BIN/nonewprivs" "$BIN/pause" "$BIN/busybox" "$BIN/nc.openbsd" "${HOST_TOOLS[@]}"
} | sha256sum | cut -c1-16)
if [[ ${FORCE:-0} != 1 && "$(cat "$STAMP" 2>/dev/null)" == "$hash" ]] && all_present; then
  log "all ${#IMAGES[@]} images are served (stamp $hash)"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "building the stand-in images (stamp $hash)"
# The blobs of an earlier build would stay in the registry's storage for ever: start afresh.
if [[ -n ${REGISTRY_DATA:-} && -d $REGISTRY_DATA/docker ]]; then rm -rf "$REGISTRY_DATA/docker"; fi

# --- the busybox base ---------------------------------------------------------------------------
# Upstream busybox 1.35.0 (build.sh), dynamically linked with the host's glibc, copied at the
# host paths; every applet a hard link in /bin as in the upstream image (masking /bin/ls hides
# that path only).
R=$work/rootfs
mkdir -p "$R"/{bin,etc,dev,proc,sys,root,run,tmp,var/tmp,home,usr/bin,usr/sbin,usr/local/bin}
chmod 1777 "$R/tmp" "$R/var/tmp"
install -m 0755 "$BIN/busybox" "$R/bin/busybox"
ldd "$BIN/busybox" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do mkdir -p "$R$(dirname "$lib")" && cp -fL "$lib" "$R$lib"; done
for a in $("$BIN/busybox" --list); do
  [[ $a == busybox ]] || ln -f "$R/bin/busybox" "$R/bin/$a"
done
: >"$R/etc/hosts"
: >"$R/etc/resolv.conf"
: >"$R/etc/hostname"
# The users and groups of the upstream busybox image.
cp "$ROOT/test/lib/busybox-etc/passwd" "$ROOT/test/lib/busybox-etc/group" "$work/rootfs/etc/"
# glibc's default without this file asks DNS before /etc/hosts (hostname -f, wget of a pod name).
echo 'hosts: files dns' >"$work/rootfs/etc/nsswitch.conf"
ln -s ../run "$R/var/run"
BASE=cri-dockerd-ci/e2e-node-base:$hash
tar --numeric-owner --owner=0 --group=0 -C "$work/rootfs" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["sh"]' - "$BASE" >/dev/null

# copy_tool DEST PROGRAM [PATH]: PROGRAM (at PATH in the image, default its host path) and the
# shared libraries it links, at their host paths.
copy_tool() {
  local dest=$1 prog=$2 path=${3:-$2} lib
  install -D -m 0755 "$prog" "$dest$path"
  ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while read -r lib; do
      # cp keeps the mode: the dynamic loader must stay executable.
      [[ -e $dest$lib ]] || { mkdir -p "$dest$(dirname "$lib")" && cp -fL "$lib" "$dest$lib"; }
    done
}

mkdir -p "$work/bin"
gcc -static -Os -s -o "$work/bin/nginx" "$ROOT/test/critest/standins/nginx.c"

# fake_registry DIR: agnhost fake-registry-server's /var/registry: pause:testing, i.e. the
# pause stand-in's manifest and blobs, laid out by digest as prepare_registry.sh does.
fake_registry() {
  local dir=$1/var/registry/pause mt=application/vnd.docker.distribution.manifest.v2+json
  local manifest digest d
  manifest=$(curl -sf -H "Accept: $mt" "$REGISTRY_URL/v2/pause/manifests/3.10.2")
  digest=sha256:$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)
  mkdir -p "$dir/manifests/sha256/${digest:7:2}/${digest#sha256:}"
  printf '%s' "$manifest" >"$dir/manifests/sha256/${digest:7:2}/${digest#sha256:}/data"
  echo "$digest" >"$dir/manifests/testing"
  for d in $(printf '%s' "$manifest" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["config"]["digest"]); [print(l["digest"]) for l in m["layers"]]'); do
    mkdir -p "$dir/blobs/sha256/${d:7:2}/${d#sha256:}"
    curl -sf -o "$dir/blobs/sha256/${d:7:2}/${d#sha256:}/data" "$REGISTRY_URL/v2/pause/blobs/$d"
  done
}

# build_context KIND NAME DIR: DIR/Dockerfile and DIR/extra.tar (ADDed as a tar: it keeps the
# owners and the setuid bit, which COPY drops). /etc/e2e-node-image holds the image's name, so
# every image has its own ID.
build_context() {
  local kind=$1 name=$2 dir=$3 x=$3/extra t
  mkdir -p "$x/etc"
  echo "$name" >"$x/etc/e2e-node-image"
  local from=$BASE tail=()
  case $kind in
  busybox) tail=('CMD ["sh"]') ;;
  nonroot) tail=('USER 1234' 'CMD ["sh"]') ;;
  agnhost | kitten | nautilus)
    install -m 0755 "$BIN/agnhost" "$x/agnhost"
    ln -s agnhost "$x/agnhost-2"
    mkdir -p "$x/uploads"
    cp "$K8S_SRC/test/images/agnhost/porter/localhost.crt" "$K8S_SRC/test/images/agnhost/porter/localhost.key" "$x/"
    for t in "${HOST_TOOLS[@]}"; do copy_tool "$x" "$t"; done
    # Where Alpine has them: scripts run /bin/bash; netcat-openbsd is agnhost's nc.
    mkdir -p "$x/bin" && ln -s /usr/bin/bash "$x/bin/bash"
    copy_tool "$x" "$BIN/nc.openbsd" /usr/bin/nc
    cp "$work/rootfs/etc/passwd" "$work/rootfs/etc/group" "$x/etc/"
    echo 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh' >>"$x/etc/passwd"
    echo 'user-defined-in-image:x:1000:' >>"$x/etc/group"
    echo 'group-defined-in-image:x:50000:user-defined-in-image' >>"$x/etc/group"
    mkdir -p "$x/home/user-defined-in-image" && chown 1000:1000 "$x/home/user-defined-in-image"
    # What agnhost's base (alpine:3.21) says it is, where Alpine keeps it: the ImageVolume specs
    # mount kitten and want "Alpine Linux" in its etc/os-release.
    mkdir -p "$x/usr/lib"
    printf '%s\n' 'NAME="Alpine Linux"' 'ID=alpine' 'VERSION_ID=3.21.0' 'PRETTY_NAME="Alpine Linux v3.21"' \
      'HOME_URL="https://alpinelinux.org/"' 'BUG_REPORT_URL="https://gitlab.alpinelinux.org/alpine/aports/-/issues"' \
      >"$x/usr/lib/os-release"
    ln -s ../usr/lib/os-release "$x/etc/os-release"
    fake_registry "$x"
    tail=('EXPOSE 80 8080 8081 9376 5000' 'ENTRYPOINT ["/agnhost"]' 'CMD ["pause"]')
    if [[ $kind != agnhost ]]; then
      cp "$K8S_SRC/test/images/$kind/html/"* "$x/"
      tail=('EXPOSE 80 8080 8081 9376 5000' 'ENTRYPOINT ["/agnhost"]' 'CMD ["test-webserver"]')
    fi
    ;;
  nginx)
    install -D -m 0755 "$work/bin/nginx" "$x/usr/sbin/nginx"
    mkdir -p "$x/usr/share/nginx/html"
    echo '<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>' \
      >"$x/usr/share/nginx/html/index.html"
    tail=('ENV NGINX_PORT=80' 'EXPOSE 80' 'STOPSIGNAL SIGQUIT' 'CMD ["/usr/sbin/nginx", "-g", "daemon off;"]')
    ;;
  nonewprivs)
    install -D -m 4755 "$BIN/nonewprivs" "$x/usr/local/bin/nnp"
    tail=('CMD ["nnp"]')
    ;;
  glibc-dns)
    # The DNS conformance specs' glibc querier runs hostname, dig and getent in this image.
    local t
    for t in /usr/bin/hostname /usr/bin/dig /usr/bin/getent; do copy_tool "$x" "$t"; done
    # Debian's hostname (glibc: hostname -f resolves through nsswitch) ahead of busybox's.
    mkdir -p "$x/bin" && ln -sf /usr/bin/hostname "$x/bin/hostname"
    tail=('CMD ["sh"]')
    ;;
  pause)
    rm -rf "${x:?}/etc"
    install -D -m 0755 "$BIN/pause" "$x/pause"
    from=scratch
    tail=('USER 65535:65535' 'ENTRYPOINT ["/pause"]')
    ;;
  *) log "unknown image kind $kind"; exit 1 ;;
  esac
  tar --numeric-owner -C "$x" -cf "$dir/extra.tar" .
  rm -rf "$x"
  {
    echo "FROM $from"
    echo "LABEL io.cri-dockerd.e2e-node.standin=\"$name\" io.cri-dockerd.e2e-node.hash=\"$hash\""
    echo "ADD extra.tar /"
    printf '%s\n' "${tail[@]}"
  } >"$dir/Dockerfile"
}

i=0
for line in "${IMAGES[@]}"; do
  kind=${line%% *} name=${line#* }
  i=$((i + 1))
  dir=$work/img$i
  mkdir -p "$dir"
  build_context "$kind" "$name" "$dir"
  docker build -q -t "$name" "$dir" >/dev/null
  docker push "$name" >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; log "push of $name failed"; exit 1; }
  log "pushed $kind: $name"
done
all_present || { log "the registry does not serve every image after pushing"; exit 1; }
echo "$hash" >"$STAMP"
log "all ${#IMAGES[@]} images are served (stamp $hash)"
