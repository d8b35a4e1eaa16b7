#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Prepares a Docker engine for cri-dockerd's integration tests: Debian's docker.io (20.10,
# API 1.41, the oldest engine we support), three extra OCI runtimes the tests select by name,
# and a running dockerd. Idempotent; takes well under 2 s when everything is in place.
set -euo pipefail

# /usr/bin/docker is Debian's client matching the 20.10 daemon (/usr/local/bin/docker may be
# a newer client that some machines ship).
DOCKER=/usr/bin/docker
LIBEXEC=/usr/local/libexec/cri-dockerd-test
LOGDIR=/var/log/cri-dockerd-test
DAEMON_JSON=/etc/docker/daemon.json

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../test/lib/common.sh
. "$HERE/../test/lib/common.sh"
LOG_PREFIX=docker.sh

# 1. Debian packages; apt-get update only when something is missing (it is the slow part).
# jq merges daemon.json without clobbering keys we do not own.
pkgs=(docker.io ca-certificates iproute2 jq python3 containernetworking-plugins)
# gVisor (Debian's release 20221219), the sandboxed runtime the RuntimeClass tests run pods on.
((${TEST_RUNTIMES:-1})) && pkgs+=(runsc)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

RUNC=$(command -v runc || true)
[[ -n $RUNC ]] || { log "runc not found after installing docker.io"; exit 1; }

# TEST_RUNTIMES=0 (used by `make run`) only installs and starts Docker: a node keeps its
# daemon.json as it is.
TEST_RUNTIMES=${TEST_RUNTIMES:-1}

# 2. Test runtimes.
# "wrapped" logs each invocation so a test can prove which runtime really ran a container,
# not only what Docker recorded.
changed=0
if ((TEST_RUNTIMES)); then
mkdir -p "$LIBEXEC" "$LOGDIR"
wrapper=$LIBEXEC/runc-logging
wrapper_text="#!/bin/sh
# Test runtime for cri-dockerd: log the runtime invocation, then behave exactly like runc.
echo \"\$(date +%s.%N) \$*\" >>$LOGDIR/runtime-wrapped.log
exec $RUNC \"\$@\"
"
if [[ ! -x $wrapper || "$(cat "$wrapper")"$'\n' != "$wrapper_text" ]]; then
  printf '%s' "$wrapper_text" >"$wrapper.tmp" && chmod 0755 "$wrapper.tmp" && mv -f "$wrapper.tmp" "$wrapper"
fi
# "broken" points at a directory: the classic misconfiguration, which Docker accepts at
# create and which fails only at start.
mkdir -p "$LIBEXEC/broken-runtime-dir"

# 3. daemon.json: merge our runtimes, keep every other key (and other runtimes) as they are.
# gVisor three ways (docs/alternative-runtimes.md): "gvisor" uses the network namespace it is
# started in (--network=host), so interfaces a CNI ADD makes after the pause container started
# are seen; "gvisor-nonet" has loopback only; "gvisor-sandbox" is gVisor's default network
# mode, which fails on Docker here (the tests check how we report and clean that up). The first
# two take --oci-seccomp: without it runsc ignores the spec's seccomp filter.
RUNSC=$(command -v runsc)
runtimes=$(jq -n --arg w "$wrapper" --arg runc "$RUNC" --arg b "$LIBEXEC/broken-runtime-dir" --arg runsc "$RUNSC" '{
  "wrapped":  {path: $w},
  "runc-alt": {path: $runc, runtimeArgs: ["--root", "/run/runc-alt"]},
  "broken":   {path: $b},
  "gvisor":         {path: $runsc, runtimeArgs: ["--network=host", "--oci-seccomp"]},
  "gvisor-nonet":   {path: $runsc, runtimeArgs: ["--network=none", "--oci-seccomp"]},
  "gvisor-sandbox": {path: $runsc}
}')
mkdir -p "$(dirname "$DAEMON_JSON")"
old='{}'
[[ -s $DAEMON_JSON ]] && old=$(cat "$DAEMON_JSON")
new=$(jq --argjson rt "$runtimes" '.runtimes = ((.runtimes // {}) + $rt)' <<<"$old")
if [[ ! -s $DAEMON_JSON ]] || ! jq -e --argjson new "$new" '. == $new' "$DAEMON_JSON" >/dev/null; then
  printf '%s\n' "$new" >"$DAEMON_JSON.tmp" && mv -f "$DAEMON_JSON.tmp" "$DAEMON_JSON"
  changed=1
  log "wrote $DAEMON_JSON"
fi
fi

have_runtimes() {
  ((TEST_RUNTIMES)) || return 0
  local rts
  rts=$("$DOCKER" info --format '{{json .Runtimes}}' 2>/dev/null) || return 1
  jq -e 'has("wrapped") and has("runc-alt") and has("broken") and has("gvisor") and has("gvisor-nonet") and has("gvisor-sandbox")' <<<"$rts" >/dev/null
}

answers() { "$DOCKER" version >/dev/null 2>&1; }

# 4. dockerd. Nothing starts it on these machines (no systemd), so start it detached from the
# calling shell (setsid + nohup) so that it outlives this script and its CI step.
if answers; then
  # Already running: SIGHUP makes dockerd reload the runtimes of daemon.json. Also do it when
  # the runtimes are missing, e.g. a daemon started before an earlier run wrote the file.
  if ((changed)) || ! have_runtimes; then
    # Without its pid file, the dockerd this script starts (not Docker 29's, nor a test's own).
    pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -f -x 'dockerd --host unix:///var/run/docker.sock' || true)
    [[ $pid =~ ^[0-9]+$ ]] || { log "dockerd answers but its pid is unknown; restart it to load $DAEMON_JSON"; exit 1; }
    log "reloading dockerd ($pid)"
    kill -HUP "$pid"
    wait_for 10 "dockerd to load the test runtimes" have_runtimes ||
      { log "dockerd did not load the test runtimes; see /var/log/dockerd.log"; exit 1; }
  fi
else
  log "starting dockerd (log: /var/log/dockerd.log)"
  setsid nohup dockerd --host unix:///var/run/docker.sock </dev/null >>/var/log/dockerd.log 2>&1 &
  wait_for 60 "dockerd to answer" answers || { log "dockerd did not answer:"; tail -20 /var/log/dockerd.log >&2; exit 1; }
  have_runtimes || { log "dockerd runs without the test runtimes; see /var/log/dockerd.log"; exit 1; }
fi

"$DOCKER" version --format 'docker server {{.Server.Version}}, API {{.Server.APIVersion}} (min {{.Server.MinAPIVersion}})'
# shellcheck disable=SC2016 # a Go template for docker's --format, not shell
"$DOCKER" info --format '{{range $n, $r := .Runtimes}}runtime {{$n}}: {{$r.Path}} {{join $r.Args " "}}{{println}}{{end}}'
