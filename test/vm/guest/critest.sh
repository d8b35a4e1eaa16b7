#!/bin/bash
# critest inside the guest, run by test/vm/critest.sh: serves the stand-in images itself (the
# guest has no network), starts cri-dockerd with CNI as test/critest/run.sh does, runs critest
# and leaves junit.xml, critest.log and cri-dockerd.log in $VM_OUT.
set -euo pipefail
log() { echo "vm critest: $* (at ${SECONDS}s)"; }
wait_for() {
	local end=$((SECONDS + $1))
	shift
	while [ "$SECONDS" -lt "$end" ]; do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	return 1
}
# The binaries run from the guest's disk: the 9p share has no page cache, so each page a binary
# faults in would be read from the host again.
bin=/usr/local/crid-critest
mkdir -p "$bin"
cp "$VM_IN/cri-dockerd" "$VM_IN/crictl" "$VM_IN/critest" "$VM_IN/docker-registry" "$bin/"
reg=/var/lib/crid-registry
mkdir -p "$reg"
tar -C "$reg" -xf "$VM_IN/registry-data.tar"
for h in registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws; do
	echo "127.0.0.1 $h" >>/etc/hosts
	install -D -m 0644 "$VM_IN/certs/ca.crt" "/etc/docker/certs.d/$h/ca.crt"
done
cat >"$reg/config.yml" <<YML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $reg/data
http:
  addr: 127.0.0.1:443
  tls:
    certificate: $VM_IN/certs/server.crt
    key: $VM_IN/certs/server.key
YML
"$bin/docker-registry" serve "$reg/config.yml" >"$VM_OUT/registry.log" 2>&1 &
wait_for 300 docker info || { log "docker not ready"; exit 1; }
docker load -i "$VM_IN/pause.tar" >/dev/null
log "docker $(docker version --format '{{.Server.Version}}') ready, cgroup driver $(docker info --format '{{.CgroupDriver}} v{{.CgroupVersion}}')"

mkdir -p /etc/crid-critest/net.d
cp "$VM_IN/10-critest.conflist" /etc/crid-critest/net.d/
sock=/run/crid-critest.sock
"$bin/cri-dockerd" --container-runtime-endpoint "unix://$sock" --cri-dockerd-root-directory /var/lib/crid-critest \
	--network-plugin=cni --cni-conf-dir /etc/crid-critest/net.d --log-level info >"$VM_OUT/cri-dockerd.log" 2>&1 &
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 120\n' "$sock" "$sock" >/etc/crictl.yaml
wait_for 120 "$bin/crictl" version || { log "cri-dockerd does not serve"; tail -20 "$VM_OUT/cri-dockerd.log"; exit 1; }
log "cri-dockerd serves"
# critest's AppArmor specs load and remove their profiles with `sudo apparmor_parser`; the
# guest runs this as root and has no sudo.
if ! command -v sudo >/dev/null; then
	printf '#!/bin/sh\nexec "$@"\n' >/usr/local/bin/sudo
	chmod 0755 /usr/local/bin/sudo
fi
args=(-config /etc/crictl.yaml -runtime-endpoint "unix://$sock" -image-endpoint "unix://$sock"
	"-ginkgo.junit-report=$VM_OUT/junit.xml" -ginkgo.timeout=60m -ginkgo.no-color -ginkgo.v)
focus=$(cat "$VM_IN/focus")
[ -n "$focus" ] && args+=("-ginkgo.focus=$focus")
start=$SECONDS
set +e
(cd /tmp && "$bin/critest" "${args[@]}") >"$VM_OUT/critest.log" 2>&1
rc=$?
set -e
log "critest exited $rc after $((SECONDS - start)) s"
grep -E '^(Ran|FAIL!|SUCCESS!)' "$VM_OUT/critest.log" || tail -5 "$VM_OUT/critest.log"
exit 0
