#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Offline stand-ins for every image critest (cri-tools v1.37.0) pulls on Linux.
#
# critest pulls fixed names from public registries (registry.k8s.io, k8s.gcr.io, gcr.io, and
# public.ecr.aws for the benchmarks), and most specs look the image up again by that exact name,
# so a --registry-prefix cannot help. Instead this script:
#   1. makes a local CA and a server certificate for those hosts (openssl);
#   2. points the hosts at 127.0.0.1 in /etc/hosts and installs the CA as
#      /etc/docker/certs.d/<host>/ca.crt (dockerd reads it per pull: no restart);
#   3. runs Debian's docker-registry (distribution 2.8) with TLS on 127.0.0.1:443; one storage
#      serves every host, so registry.k8s.io/pause and k8s.gcr.io/pause are the same image;
#   4. builds busybox-based stand-ins with the property each spec checks (see IMAGES below) and
#      pushes them.
# Idempotent: step 4 is skipped when the stamp (a hash of this script and its inputs) matches
# and the registry still has every manifest.
#
# `registry.sh stop` stops the registry (run.sh does at the end of each run, pass or fail, so
# nothing is left on 127.0.0.1:443). Its data stays in the cache: the next start serves every
# image again without building or pushing, in about a second.
#
# Env: CRITEST_CACHE (default /var/cache/cri-dockerd-ci), FORCE=1 rebuilds and pushes anyway.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DOCKER=/usr/bin/docker # Debian's client, matching the 20.10 daemon
export DOCKER_BUILDKIT=0 # classic builder: FROM a local image, offline
CACHE=${CRITEST_CACHE:-/var/cache/cri-dockerd-ci}
REG=$CACHE/registry
ADDR=127.0.0.1:443
HOSTS=(registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws)
HOSTS_MARK="# cri-dockerd-ci critest registry"

E2E=registry.k8s.io/e2e-test-images
CRI=gcr.io/k8s-staging-cri-tools
ECR=public.ecr.aws/docker/library

# IMAGES: "KIND TAG [TAG...]". One line is one image (one image ID); its tags are pushed.
# KIND says what the image must offer (see build_context). Sources of the names and properties:
# pkg/framework/{util,test_context}.go, pkg/validate/{consts,consts_linux,image,
# security_context_linux,multi_container_linux,networking,streaming}.go, pkg/benchmark/image.go.
IMAGES=(
  # Default container image: sh, echo, sleep, top, ls, cat, id, hostname, ping, pidof, pgrep, ipcs...
  "busybox $E2E/busybox:1.29-2"
  # Web servers: HTTP 200 on / at port 80 (nginx, httpd) or 12003 (hostnet-nginx, host network);
  # nginx also: /var/run/nginx.pid, a process named nginx, "master process" in its cmdline;
  # httpd also: "httpd" in its log.
  "nginx $E2E/nginx:1.14-2"
  "hostnet-nginx $CRI/hostnet-nginx-amd64:latest"
  "httpd $E2E/httpd:2.4.39-4"
  # Setuid-root binary printing "Effective uid: N", USER 1000.
  "nonewprivs $E2E/nonewprivs:1.3"
  # Same image on two registries (one storage here); runnable with its default entrypoint.
  "pause registry.k8s.io/pause:3.9"
  # Image config USER: uid / username / uid:gid / username:gid.
  "user:1002 $CRI/test-image-user-uid:latest"
  "user:www-data $CRI/test-image-user-username:latest"
  "user:1003:1004 $CRI/test-image-user-uid-group:latest"
  "user:www-data:1004 $CRI/test-image-user-username-group:latest"
  # USER 1000 (default-user), member of group-defined-in-image (gid 50000) in /etc/group.
  "predefined-group $CRI/test-image-predefined-group:latest"
  # Plain busybox images, each with distinct content (distinct image IDs).
  "plain $CRI/test-image-latest:latest"
  "plain $CRI/test-image-tag:test"
  "plain $CRI/test-image-tag:all"
  "plain $CRI/test-image-1:latest"
  "plain $CRI/test-image-2:latest"
  "plain $CRI/test-image-3:latest"
  # One image under three tags.
  "plain $CRI/test-image-tags:1 $CRI/test-image-tags:2 $CRI/test-image-tags:3"
  # test-image-digest is pulled by an upstream digest that cannot be rebuilt offline; the name
  # is served anyway so that the spec fails on the digest, not on a missing repository.
  "plain $CRI/test-image-digest:latest"
  # critest -benchmark (image listing/pulling benchmarks).
  "plain $ECR/busybox:1.35.0-glibc"
  "plain $ECR/busybox:1-uclibc"
  "plain $ECR/busybox:1"
  "plain $ECR/busybox:1-glibc"
  "plain $ECR/busybox:1-musl"
)
# Names pulled from a host other than the one pushed to (same registry storage).
ALSO_SERVED=("k8s.gcr.io/pause:3.9")

# shellcheck source=../lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=registry.sh

# registry_pid: the pid of the registry this script started, if it still runs.
registry_pid() {
  local pid
  pid=$(cat "$REG/registry.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && running "$pid" && echo "$pid"
}

# running PID: the process runs docker-registry (not gone, and not a zombie, which has no exe).
running() { [[ "$(readlink "/proc/$1/exe" 2>/dev/null)" == /usr/bin/docker-registry ]]; }

# stop_registry: SIGTERM to the registry of the pid file, and wait for it to go (5 s, then SIGKILL).
stop_registry() {
  local pid
  pid=$(registry_pid) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then
    log "registry $pid did not stop within 5 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do running "$pid" || break; sleep 0.1; done
  fi
  # Only our pid: a run that waited for the lock this registry held may have started another.
  [[ "$(cat "$REG/registry.pid" 2>/dev/null)" != "$pid" ]] || rm -f "$REG/registry.pid"
  log "stopped the registry ($pid)"
}

if [[ ${1:-} == stop ]]; then
  stop_registry
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [stop]" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# 1. Packages.
need=()
[[ -x /usr/bin/docker-registry ]] || need+=(docker-registry)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" ||
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; }
fi
"$DOCKER" version >/dev/null 2>&1 || { log "dockerd does not answer; run hack/docker.sh first"; exit 1; }

mkdir -p "$REG/certs" "$REG/data"
CA=$REG/certs/ca.crt

# ---------------------------------------------------------------------------------------------
# 2. CA and server certificate (regenerated only when missing or the host list changed).
restart=0
if [[ ! -s $CA || ! -s $REG/certs/server.crt || "$(cat "$REG/certs/hosts" 2>/dev/null)" != "${HOSTS[*]}" ]]; then
  log "creating the local CA and the certificate for ${HOSTS[*]}"
  (
    cd "$REG/certs"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout ca.key -out ca.crt \
      -subj "/CN=cri-dockerd CI local registry CA" 2>/dev/null
    san=$(printf 'DNS:%s,' "${HOSTS[@]}")IP:127.0.0.1
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout server.key -out server.csr \
      -subj "/CN=${HOSTS[0]}" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile server.ext -out server.crt 2>/dev/null
    rm -f server.csr server.ext
    echo "${HOSTS[*]}" >hosts
  )
  restart=1
fi

# ---------------------------------------------------------------------------------------------
# 3. /etc/hosts and /etc/docker/certs.d. /etc/hosts may be a bind mount: append in place.
for h in "${HOSTS[@]}"; do
  if ! awk -v h="$h" '$1 == "127.0.0.1" { for (i = 2; i <= NF && $i !~ /^#/; i++) if ($i == h) f = 1 } END { exit !f }' /etc/hosts; then
    echo "127.0.0.1 $h $HOSTS_MARK" >>/etc/hosts
    log "added $h to /etc/hosts"
  fi
  if ! cmp -s "$CA" "/etc/docker/certs.d/$h/ca.crt"; then
    install -D -m 0644 "$CA" "/etc/docker/certs.d/$h/ca.crt"
  fi
done

# ---------------------------------------------------------------------------------------------
# 4. The registry.
config="version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $REG/data
  delete:
    enabled: true
http:
  addr: $ADDR
  tls:
    certificate: $REG/certs/server.crt
    key: $REG/certs/server.key
"
if [[ "$(cat "$REG/config.yml" 2>/dev/null)"$'\n' != "$config" ]]; then
  printf '%s' "$config" >"$REG/config.yml"
  restart=1
fi

registry_up() { curl -sf -o /dev/null --max-time 3 --cacert "$CA" "https://${HOSTS[0]}/v2/"; }

if ((restart)) && pid=$(registry_pid); then
  log "restarting the registry ($pid) for its new configuration"
  stop_registry
fi
if ! registry_up; then
  if pid=$(registry_pid); then
    log "registry $pid does not answer; restarting it"
    stop_registry
  fi
  if ss -Hltn "sport = :443" | grep -q .; then
    log "port 443 is taken by another program:"; ss -Hltnp "sport = :443" >&2; exit 1
  fi
  log "starting docker-registry on $ADDR (log: $REG/registry.log)"
  # It outlives this script (run.sh stops it with `registry.sh stop`): it gets no descriptor of
  # ours but stdin, stdout and stderr, or it would hold whatever lock its caller took (run.sh's
  # critest lock on 9, build-k8s.sh's on 8, `flock FILE registry.sh`'s on another), and every
  # later run would wait for it.
  (
    for fd in "/proc/$BASHPID/fd/"*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid nohup /usr/bin/docker-registry serve "$REG/config.yml" </dev/null >>"$REG/registry.log" 2>&1
  ) &
  echo $! >"$REG/registry.pid"
  wait_for 10 "the registry to answer" registry_up ||
    { log "the registry did not answer:"; tail -20 "$REG/registry.log" >&2; exit 1; }
fi

# ---------------------------------------------------------------------------------------------
# 5. Images: skip when the stamp matches and the registry still serves every name.
hash=$(cat "${BASH_SOURCE[0]}" "$HERE"/standins/* "$ROOT/hack/busybox-rootfs.sh" "$ROOT"/test/lib/busybox-etc/* | sha256sum | cut -c1-16)
STAMP=$REG/pushed

# all_names: every NAME:TAG pulled from the registry.
all_names() {
  local line
  for line in "${IMAGES[@]}"; do
    # shellcheck disable=SC2086
    set -- $line
    shift
    printf '%s\n' "$@"
  done
  printf '%s\n' "${ALSO_SERVED[@]}"
}

manifest_present() { # NAME:TAG with a host
  local ref=$1 host path repo tag
  host=${ref%%/*} path=${ref#*/}
  repo=${path%:*} tag=${path##*:}
  curl -sf -o /dev/null -I --max-time 5 --cacert "$CA" \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "https://$host/v2/$repo/manifests/$tag"
}

all_present() {
  local ref
  while read -r ref; do manifest_present "$ref" || return 1; done < <(all_names)
}

if [[ ${FORCE:-0} != 1 && "$(cat "$STAMP" 2>/dev/null)" == "$hash" ]] && all_present; then
  log "all $(all_names | wc -l) images are served (stamp $hash)"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log "building the stand-in images"
# Images of an earlier build, removed below once the new build has taken their names.
old_ids=$(all_names | xargs "$DOCKER" image inspect --format '{{.Id}}' 2>/dev/null | sort -u || true)
# Base: busybox rootfs (hack/busybox-rootfs.sh) with the users and groups of the
# upstream busybox image, /var/run, and pgrep/ipcs (not applets of Debian's busybox).
"$ROOT/hack/busybox-rootfs.sh" "$work/rootfs"
# The users and groups of the upstream busybox image.
cp "$ROOT/test/lib/busybox-etc/passwd" "$ROOT/test/lib/busybox-etc/group" "$work/rootfs/etc/"
# Applets as hard links, as in the upstream busybox image: masking /bin/ls (MaskedPaths spec)
# must hide that one path, not /bin/busybox, which a bind mount over a symlink would hide.
for f in "$work/rootfs/bin"/*; do
  if [[ -L $f && "$(readlink "$f")" == busybox ]]; then ln -f "$work/rootfs/bin/busybox" "$f"; fi
done
mkdir -p "$work/rootfs/var" "$work/rootfs/usr/bin" "$work/rootfs/usr/sbin" "$work/rootfs/home"
[[ -e $work/rootfs/var/run ]] || ln -s ../run "$work/rootfs/var/run"
install -m 0755 "$HERE/standins/pgrep" "$work/rootfs/usr/bin/pgrep"
install -m 0755 "$HERE/standins/ipcs" "$work/rootfs/usr/bin/ipcs"
BASE=cri-dockerd-ci/critest-base:$hash
tar --numeric-owner --owner=0 --group=0 -C "$work/rootfs" -c . | "$DOCKER" import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["sh"]' - "$BASE" >/dev/null

mkdir -p "$work/bin"
for p in nginx nnp pause; do
  gcc -static -Os -s -o "$work/bin/$p" "$HERE/standins/$p.c"
done

# build_context KIND NAME DIR: writes DIR/Dockerfile and DIR/extra/ (added as a tar, which keeps
# owners and the setuid bit; COPY would drop it). Every image gets /etc/critest-image with its
# own name, so every image has its own ID.
build_context() {
  local kind=$1 name=$2 dir=$3 x=$3/extra user
  mkdir -p "$x/etc"
  echo "$name" >"$x/etc/critest-image"
  {
    echo "FROM $BASE"
    echo "LABEL io.cri-dockerd.critest.standin=\"$name\" io.cri-dockerd.critest.hash=\"$hash\""
  } >"$dir/Dockerfile"
  case $kind in
  busybox | plain)
    echo 'CMD ["sh"]' >>"$dir/Dockerfile"
    ;;
  user:*)
    user=${kind#user:}
    printf 'USER %s\nCMD ["sh"]\n' "$user" >>"$dir/Dockerfile"
    ;;
  predefined-group)
    cp "$work/rootfs/etc/passwd" "$work/rootfs/etc/group" "$x/etc/"
    echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' >>"$x/etc/passwd"
    echo 'default-user:x:1000:' >>"$x/etc/group"
    echo 'group-defined-in-image:x:50000:default-user' >>"$x/etc/group"
    mkdir -p "$x/home/default-user" && chown 1000:1000 "$x/home/default-user"
    printf 'USER 1000\nCMD ["sh"]\n' >>"$dir/Dockerfile"
    ;;
  nginx | hostnet-nginx)
    local port=80
    [[ $kind == hostnet-nginx ]] && port=12003
    install -D -m 0755 "$work/bin/nginx" "$x/usr/sbin/nginx"
    mkdir -p "$x/usr/share/nginx/html"
    echo '<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1><p>(cri-dockerd CI stand-in)</p></body></html>' \
      >"$x/usr/share/nginx/html/index.html"
    printf 'ENV NGINX_PORT=%s\nEXPOSE %s\nCMD ["/usr/sbin/nginx", "-g", "daemon off;"]\n' "$port" "$port" >>"$dir/Dockerfile"
    ;;
  httpd)
    mkdir -p "$x/usr/local/apache2/htdocs" "$x/usr/local/bin"
    echo '<html><body><h1>It works!</h1></body></html>' >"$x/usr/local/apache2/htdocs/index.html"
    cat >"$x/usr/local/bin/httpd-foreground" <<'EOF'
#!/bin/sh
# httpd stand-in: busybox httpd on port 80; says "httpd" in its log, as the spec checks.
echo "httpd: stand-in for httpd 2.4.39 (busybox httpd) listening on port 80" >&2
httpd -f -p 80 -h /usr/local/apache2/htdocs &
trap 'kill $! 2>/dev/null; exit 0' TERM INT
wait
EOF
    chmod 0755 "$x/usr/local/bin/httpd-foreground"
    printf 'EXPOSE 80\nCMD ["/usr/local/bin/httpd-foreground"]\n' >>"$dir/Dockerfile"
    ;;
  nonewprivs)
    install -D -m 4755 "$work/bin/nnp" "$x/usr/local/bin/nnp"
    printf 'USER 1000\nCMD ["/usr/local/bin/nnp"]\n' >>"$dir/Dockerfile"
    ;;
  pause)
    install -D -m 0755 "$work/bin/pause" "$x/pause"
    # A pause image has nothing but the binary.
    {
      echo "FROM scratch"
      echo "LABEL io.cri-dockerd.critest.standin=\"$name\" io.cri-dockerd.critest.hash=\"$hash\""
      echo 'ENTRYPOINT ["/pause"]'
    } >"$dir/Dockerfile"
    rm -rf "${x:?}/etc"
    ;;
  *)
    log "unknown image kind $kind"
    exit 1
    ;;
  esac
  # Owners as in the tree (root, but uid 1000 for default-user's home).
  tar --numeric-owner -C "$x" -cf "$dir/extra.tar" .
  rm -rf "$x"
  sed -i '2a ADD extra.tar /' "$dir/Dockerfile"
}

i=0
for line in "${IMAGES[@]}"; do
  # shellcheck disable=SC2086
  set -- $line
  kind=$1
  shift
  i=$((i + 1))
  dir=$work/img$i
  mkdir -p "$dir"
  build_context "$kind" "$1" "$dir"
  tags=()
  for t in "$@"; do tags+=(-t "$t"); done
  "$DOCKER" build -q "${tags[@]}" "$dir" >/dev/null
  for t in "$@"; do
    "$DOCKER" push "$t" >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; log "push of $t failed"; exit 1; }
  done
  log "pushed $kind: $*"
done

all_present || { log "the registry does not serve every image after pushing"; exit 1; }
new_ids=$(all_names | xargs "$DOCKER" image inspect --format '{{.Id}}' 2>/dev/null | sort -u || true)
comm -23 <(echo "$old_ids") <(echo "$new_ids") | grep . | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
# Bases of earlier versions of this script (untagged only while images still use them).
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' cri-dockerd-ci/critest-base |
  grep -vxF "$BASE" | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
echo "$hash" >"$STAMP"
log "all $(all_names | wc -l) images are served (stamp $hash)"
