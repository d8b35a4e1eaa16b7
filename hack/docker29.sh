#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# A second Docker engine for the tests: Docker 29.8.0 with its own containerd 2.3.5 and runc 1.5.1
# (built by docker29-build.sh), running privately beside Debian's 20.10, which stays on
# /var/run/docker.sock. Nothing of the host's engine is shared: its own socket, data and exec
# roots, containerd (root, state, socket, ttrpc and shim socket dir), bridge and subnet; no
# iptables, NAT or ip_forward changes; /var/lib/docker, /var/run/docker.sock and /run/containerd
# are not touched.
#
# Usage: docker29.sh [start|stop|status]     (default: start)
#   start   builds (once) and starts the engine, or reuses it when it runs healthy with the same
#           configuration; adds the test runtimes and loads the test images (copied from the
#           20.10 engine, which hack/docker.sh and images.sh prepare)
#   stop    stops dockerd, its containers and containerd, removes the bridge; keeps the data
#           (PURGE=1 removes it too)
#   status  exit 0 when it answers
# Env:
#   DOCKER29_STORE=containerd  the image store: containerd (Docker 29's default) or overlay2
#                              (the classic store, "features": {"containerd-snapshotter": false});
#                              each store has its own data directories, switching restarts
#
# Clients: DOCKER_HOST=unix:///run/cri-dockerd-docker29/docker.sock (the Engine's minimum API
# is 1.44: Debian's /usr/bin/docker, API 1.41, cannot talk to it; curl --unix-socket can).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

NAME=cri-dockerd-docker29
RUN=/run/$NAME
SOCK=$RUN/docker.sock
CTRD_SOCK=$RUN/containerd/containerd.sock
STORE=${DOCKER29_STORE:-containerd}
LIB=/var/lib/$NAME
LOGDIR=/var/log/$NAME
# A bridge and subnet nothing else here uses (Debian's docker0 is 172.17/16, the tests' CNI
# bridges 10.88, 10.97-10.99, 10.131, private dockerds 10.254.N, the e2e 10.213-10.215).
BRIDGE=crid-d29br
BRIDGE_CIDR=10.229.0.1/24
# The test runtimes, as hack/docker.sh adds them to the 20.10 engine, but on Docker
# 29's own runc. "wrapped" logs to the same file, which the tests read.
LIBEXEC=/usr/local/libexec/cri-dockerd-test/docker29
WRAPPED_LOG=/var/log/cri-dockerd-test/runtime-wrapped.log
HOST_DOCKER=/usr/bin/docker # Debian's client of the 20.10 engine (the source of the test images)
IMAGES=(cri-dockerd-test/busybox:latest registry.k8s.io/pause:3.10)
IMAGE_LABEL=io.cri-dockerd.test.source-hash

# shellcheck source=../test/lib/common.sh
. "$ROOT/test/lib/common.sh"
LOG_PREFIX=docker29.sh

case $STORE in
containerd) snapshotter=true ;;
overlay2) snapshotter=false ;;
*) log "DOCKER29_STORE=$STORE: want containerd or overlay2"; exit 2 ;;
esac

api() { curl -sf --max-time "${2:-5}" --unix-socket "$SOCK" "http://docker$1"; }
answers() { [[ -S $SOCK ]] && [[ $(api /_ping 2>/dev/null) == OK ]]; }
pid_of() { # PIDFILE EXE: the pid in PIDFILE when that process runs EXE
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ -n $pid && "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$2" ]] && echo "$pid"
}

# stop_proc PIDFILE EXE SECONDS: SIGTERM, then SIGKILL after SECONDS; the pid file removed.
stop_proc() {
  local pid
  pid=$(pid_of "$1" "$2") || { rm -f "$1"; return 0; }
  stop_pid "$pid" "$(basename "$2") ($pid)" "$3"
  rm -f "$1"
}

stop_engine() {
  local bin
  bin=$(cat "$RUN/bin" 2>/dev/null || true)
  if [[ -n $bin ]]; then
    # dockerd stops its containers (10 s each at most, in parallel) before it exits.
    stop_proc "$RUN/docker.pid" "$bin/dockerd" 60
    # Shims of containers dockerd could not stop, then containerd.
    local p
    for p in /proc/[0-9]*; do
      if [[ "$(readlink "$p/exe" 2>/dev/null)" == "$bin/containerd-shim-runc-v2" ]] &&
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $CTRD_SOCK "; then
        kill -KILL "${p#/proc/}" 2>/dev/null || true
      fi
    done
    stop_proc "$RUN/containerd.pid" "$bin/containerd" 20
  fi
  # Mounts left under our directories (container rootfs, shm, netns), deepest first.
  awk -v run="$RUN/" -v lib="$LIB/" 'index($5, run) == 1 || index($5, lib) == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  rm -rf "$RUN"
}

cmd=${1:-start}
case $cmd in
status)
  answers
  exit
  ;;
stop)
  mkdir -p "$(dirname "$RUN")"
  exec 6>"/run/$NAME.lock"
  flock -w 300 6 || { log "another docker29.sh holds /run/$NAME.lock"; exit 1; }
  if [[ -d $RUN ]]; then
    log "stopping Docker 29 ($SOCK)"
    stop_engine
  else
    log "Docker 29 is not running"
  fi
  if [[ ${PURGE:-0} == 1 ]]; then
    awk -v lib="$LIB/" 'index($5, lib) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$LIB" "$LIBEXEC"
    log "removed $LIB"
  fi
  exit 0
  ;;
start) ;;
*)
  echo "usage: $0 [start|stop|status]" >&2
  exit 2
  ;;
esac

# --- start ------------------------------------------------------------------------------------
# One start at a time: a second caller waits, then finds the engine running.
exec 6>"/run/$NAME.lock"
flock -w 1800 6 || { log "another docker29.sh holds /run/$NAME.lock"; exit 1; }

BIN=$("$HERE/docker29-build.sh" | tail -n 1)
[[ -x $BIN/dockerd ]] || { log "docker29-build.sh gave no dockerd in '$BIN'"; exit 1; }
need=()
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
command -v runsc >/dev/null || need+=(runsc)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

# 1. Test runtimes on Docker 29's runc.
mkdir -p "$LIBEXEC/broken-runtime-dir" "$(dirname "$WRAPPED_LOG")"
wrapper=$LIBEXEC/runc-logging
wrapper_text="#!/bin/sh
# Test runtime for cri-dockerd on Docker 29: log the runtime invocation, then behave exactly
# like Docker 29's runc.
echo \"\$(date +%s.%N) \$*\" >>$WRAPPED_LOG
exec $BIN/runc \"\$@\"
"
if [[ ! -x $wrapper || "$(cat "$wrapper")"$'\n' != "$wrapper_text" ]]; then
  printf '%s' "$wrapper_text" >"$wrapper.tmp" && chmod 0755 "$wrapper.tmp" && mv -f "$wrapper.tmp" "$wrapper"
fi

# 2. Configurations. Data directories per store: the two stores do not see each other's images.
DATA=$LIB/store-$STORE
# Its first line keeps this script's old path: the text is part of config_hash below, and a
# change would restart an engine that is running with the same configuration.
containerd_toml="# Docker 29's own containerd (integration/setup/docker29.sh)
version = 4
root = \"$DATA/containerd\"
state = \"$RUN/containerd/state\"
temp = \"$DATA/containerd-tmp\"
imports = []
# CRI and NRI are not for this engine: dockerd is its only client.
disabled_plugins = [
  \"io.containerd.grpc.v1.cri\",
  \"io.containerd.cri.v1.images\",
  \"io.containerd.cri.v1.runtime\",
  \"io.containerd.podsandbox.controller.v1.podsandbox\",
  \"io.containerd.nri.v1.nri\",
]

[plugins.\"io.containerd.server.v1.grpc\"]
  address = \"$CTRD_SOCK\"
[plugins.\"io.containerd.server.v1.ttrpc\"]
  address = \"$CTRD_SOCK.ttrpc\"
[plugins.\"io.containerd.server.v1.debug\"]
  address = \"$RUN/containerd/debug.sock\"
[plugins.\"io.containerd.shim.v1.manager\"]
  # Not /run/containerd/s, which the host's containerd uses (at most 42 characters).
  socket_dir = \"$RUN/s\"
"
# gVisor as on the 20.10 engine (hack/docker.sh installs Debian's runsc), with a
# state root of its own.
daemon_json=$(jq -n --arg w "$wrapper" --arg runc "$BIN/runc" --arg b "$LIBEXEC/broken-runtime-dir" \
  --arg altroot "$RUN/runc-alt" --arg runsc "$(command -v runsc)" --arg gvroot "$RUN/runsc" --argjson snap "$snapshotter" '{
  "runtimes": {
    "wrapped":  {path: $w},
    "runc-alt": {path: $runc, runtimeArgs: ["--root", $altroot]},
    "broken":   {path: $b},
    "gvisor":         {path: $runsc, runtimeArgs: ["--root", $gvroot, "--network=host", "--oci-seccomp"]},
    "gvisor-nonet":   {path: $runsc, runtimeArgs: ["--root", $gvroot, "--network=none", "--oci-seccomp"]},
    "gvisor-sandbox": {path: $runsc, runtimeArgs: ["--root", $gvroot]}
  },
  "default-runtime": "runc",
  "exec-opts": ["native.cgroupdriver=cgroupfs"]
} + if $snap then {} else {"features": {"containerd-snapshotter": false}} end')
dockerd_args=(
  --config-file "$RUN/daemon.json"
  --containerd "$CTRD_SOCK"
  --host "unix://$SOCK"
  --data-root "$DATA/docker"
  --exec-root "$RUN/exec"
  --pidfile "$RUN/docker.pid"
  --bridge "$BRIDGE"
  --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false
)
# dockerd and the shims find runc (the default runtime) and docker-proxy in PATH: ours first.
ENV_PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
config_hash=$(printf '%s\n' "$BIN" "$STORE" "$containerd_toml" "$daemon_json" "${dockerd_args[*]}" "$BRIDGE_CIDR" | sha256sum | cut -c1-16)

healthy() {
  answers || return 1
  [[ "$(cat "$RUN/config.hash" 2>/dev/null)" == "$config_hash" ]] || return 1
  api /info | jq -e 'has("Runtimes") and (.Runtimes | has("wrapped") and has("runc-alt") and has("broken") and has("gvisor") and has("gvisor-nonet"))' >/dev/null
}

# 3. The engine: reuse it when it runs healthy with this configuration.
if healthy; then
  log "reusing Docker 29 on $SOCK (running, same configuration)"
else
  if [[ -d $RUN ]]; then
    if answers; then
      log "Docker 29 runs with another configuration (e.g. DOCKER29_STORE changed): restarting it"
    else
      log "Docker 29 does not answer: cleaning up after it"
    fi
    stop_engine
  fi
  mkdir -p "$RUN/containerd" "$RUN/exec" "$DATA/docker" "$DATA/containerd" "$DATA/containerd-tmp" "$LOGDIR"
  echo "$BIN" >"$RUN/bin"
  printf '%s' "$containerd_toml" >"$RUN/containerd.toml"
  printf '%s\n' "$daemon_json" >"$RUN/daemon.json"

  # Its bridge, on a subnet nobody else routes.
  net=${BRIDGE_CIDR%.*}.
  if ip -4 route | grep -v " dev $BRIDGE " | grep -q "^${net}"; then
    log "the subnet of $BRIDGE_CIDR is already routed elsewhere:"
    ip -4 route | grep "^${net}" >&2
    exit 1
  fi
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up

  # Both daemons detached (setsid + nohup) so they outlive this script and its CI step, with no
  # descriptor of ours but 0-2: a lock held by this script or any caller (run.sh's critest
  # lock, `flock FILE make ...`) would otherwise be held as long as they run.
  detach() { # LOG CMD...: prints the pid (setsid does not fork here: we lead no process group)
    local out=$1
    shift
    (
      for fd in "/proc/$BASHPID/fd/"*; do
        fd=${fd##*/}
        ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
      done
      exec setsid nohup env -i PATH="$ENV_PATH" HOME=/root "$@"
    ) </dev/null >>"$out" 2>&1 &
    echo $!
  }
  log "starting containerd $("$BIN/containerd" --version | awk '{print $3}') (log: $LOGDIR/containerd.log)"
  detach "$LOGDIR/containerd.log" "$BIN/containerd" --config "$RUN/containerd.toml" >"$RUN/containerd.pid"
  wait_for 30 "containerd to create $CTRD_SOCK" test -S "$CTRD_SOCK" ||
    { log "containerd did not create $CTRD_SOCK:"; tail -20 "$LOGDIR/containerd.log" >&2; exit 1; }

  log "starting dockerd $("$BIN/dockerd" --version | awk '{print $3}' | tr -d ,) ($STORE image store, log: $LOGDIR/dockerd.log)"
  detach "$LOGDIR/dockerd.log" "$BIN/dockerd" "${dockerd_args[@]}" >/dev/null
  wait_for 60 "dockerd to answer on $SOCK" answers ||
    { log "dockerd did not answer on $SOCK:"; tail -20 "$LOGDIR/dockerd.log" >&2; exit 1; }
  echo "$config_hash" >"$RUN/config.hash"
  healthy || { log "dockerd runs without the test runtimes; see $LOGDIR/dockerd.log"; exit 1; }
fi

# 4. The test images, copied from the 20.10 engine when missing or built from other sources.
image_label() { # ENDPOINT-KIND IMAGE
  if [[ $1 == host ]]; then
    "$HOST_DOCKER" image inspect --format "{{index .Config.Labels \"$IMAGE_LABEL\"}}" "$2" 2>/dev/null
  else
    api "/images/$2/json" | jq -r --arg l "$IMAGE_LABEL" '.Config.Labels[$l] // ""' 2>/dev/null
  fi
}
copy=()
for img in "${IMAGES[@]}"; do
  want=$(image_label host "$img") ||
    { log "the 20.10 engine lacks $img: run hack/docker.sh and images.sh first"; exit 1; }
  [[ $(image_label docker29 "$img" || true) == "$want" ]] || copy+=("$img")
done
if ((${#copy[@]})); then
  t0=$SECONDS
  "$HOST_DOCKER" save "${copy[@]}" |
    curl -sf --max-time 120 --unix-socket "$SOCK" -X POST -H 'Content-Type: application/x-tar' \
      --data-binary @- "http://docker/images/load?quiet=1" >"$RUN/load.out" ||
    { log "docker load into Docker 29 failed: $(cat "$RUN/load.out" 2>/dev/null)"; exit 1; }
  grep -q '"error' "$RUN/load.out" && { log "docker load into Docker 29: $(cat "$RUN/load.out")"; exit 1; }
  log "loaded ${copy[*]} from the 20.10 engine in $((SECONDS - t0)) s"
fi

api /version | jq -r '"docker29 server \(.Version), API \(.ApiVersion) (min \(.MinAPIVersion)), containerd \(.Components[] | select(.Name == "containerd") | .Version), runc \(.Components[] | select(.Name == "runc") | .Version)"'
api /info | jq -r '"driver \(.Driver) \(.DriverStatus // [] | map(join(": ")) | join(", ")), cgroup \(.CgroupDriver) v\(.CgroupVersion)"'
echo "DOCKER_HOST=unix://$SOCK"
