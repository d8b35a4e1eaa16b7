#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds (once, offline: no image registry is reachable here; debootstrap uses Debian's mirror)
# what the cluster test's nodes run, and prints the directory that holds it.
#
#   image.sh node        node.tar: the node's root as `docker import` takes it. Debian 12, systemd
#                        as PID 1, Debian's docker.io (20.10) with its containerd and runc, gVisor
#                        (runsc) as Docker runtime "gvisor", the CNI plugins, kubelet.service and kubeadm's drop-in as Kubernetes' packages
#                        ship them. kubelet, kubeadm, kubectl and our .deb are not in it: run.sh
#                        mounts and installs them, so a new build of either needs no new image.
#   image.sh images K8S_BIN CLUSTER_BIN
#                        images.tar: `docker save` of the cluster's images under the names
#                        kubeadm v1.37.2 and the manifests ask for: kube-apiserver,
#                        kube-controller-manager, kube-scheduler, kube-proxy (v1.37.2), etcd
#                        3.7.0-0, coredns v1.14.6, pause 3.10.2 and 3.10, flannel v0.28.10, and
#                        busybox (Debian's) for the test's pods. Each but pause and busybox is a
#                        small Debian 12 root with iptables (kube-proxy and flanneld program it)
#                        plus the binary where upstream's image has it. K8S_BIN and CLUSTER_BIN
#                        are what test/e2e/build-k8s.sh and test/cluster/build.sh print.
#                        DOCKER_HOST: the dockerd that builds them (run.sh's private one).
# Env: CLUSTER_CACHE (default /var/cache/cri-dockerd-ci/cluster), CLUSTER_MIRROR (Debian's).
set -euo pipefail

# Bump IMAGE_VERSION whenever the packages or the configuration below change; the binaries,
# this script and the versions are in the images' key too.
IMAGE_VERSION=1
SUITE=bookworm
NODE_PACKAGES=systemd-sysv,dbus,iproute2,procps,ca-certificates,docker.io,containerd,runc,runsc,iptables,conntrack,socat,ethtool,kmod,containernetworking-plugins,less
BASE_PACKAGES=iptables,conntrack,ca-certificates

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib/common.sh
. "$HERE/../lib/common.sh"
LOG_PREFIX=cluster/image
# K8S_VERSION, CLUSTER_ETCD_VERSION, COREDNS_VERSION, FLANNEL_VERSION: the images' tags.
# shellcheck source=../versions.sh
. "$HERE/../versions.sh"
CACHE=${CLUSTER_CACHE:-/var/cache/cri-dockerd-ci/cluster}
MIRROR=${CLUSTER_MIRROR:-http://deb.debian.org/debian}
what=${1:-}
case $what in
node) key="node-v$IMAGE_VERSION-$({ echo "$SUITE $NODE_PACKAGES"; cat "$HERE/runc-nosysresource"; sed -n '/^# --- the node/,/^# --- end of the node/p' "$0"; } | sha256sum | cut -c1-12)" ;;
images)
  K8S_BIN=${2:?usage: image.sh images K8S_BIN CLUSTER_BIN}
  CLUSTER_BIN=${3:?usage: image.sh images K8S_BIN CLUSTER_BIN}
  key="images-v$IMAGE_VERSION-$(printf '%s\n' "$K8S_BIN" "$CLUSTER_BIN" "$K8S_VERSION" "$CLUSTER_ETCD_VERSION" "$COREDNS_VERSION" "$FLANNEL_VERSION" |
    cat - "$0" "$ROOT/test/images/pause/"*.go | sha256sum | cut -c1-12)"
  ;;
*) echo "usage: $0 node | images K8S_BIN CLUSTER_BIN" >&2; exit 2 ;;
esac

[[ $(id -u) == 0 ]] || die "needs root (debootstrap)"
for tool in debootstrap docker flock; do
  command -v "$tool" >/dev/null || die "$tool not found"
done

out=$CACHE/$key
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock -w 1800 9 || die "another image.sh holds $CACHE/lock"
if [[ -e $out/.complete ]]; then
  echo "$out"
  exit 0
fi

start=$SECONDS
part=$out.partial
rm -rf "$part"
mkdir -p "$part"
cleanup() {
  local m
  { findmnt -rn -o TARGET | grep "^$part/" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$part"
}
trap cleanup EXIT

debootstrap_root() { # DIR PACKAGES
  log "debootstrap $SUITE ($2) into $1"
  nice -n 19 debootstrap --variant=minbase --include="$2" "$SUITE" "$1" "$MIRROR" >"$part/debootstrap.log" 2>&1 ||
    { tail -n 30 "$part/debootstrap.log" >&2; die "debootstrap failed"; }
  # Nothing from apt's cache: the images are for running, not installing.
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*_Packages
}

build_node() {
# --- the node ---------------------------------------------------------------------------------------
node=$part/node
debootstrap_root "$node" "$NODE_PACKAGES"
# An empty machine-id: each node's systemd makes its own at boot.
: >"$node/etc/machine-id"
# No consoles or timers in a node; nothing that waits for udev (there is none in a container).
for unit in getty@tty1.service console-getty.service apt-daily.timer apt-daily-upgrade.timer \
  e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-udevd.service \
  systemd-networkd-wait-online.service systemd-timesyncd.service; do
  ln -sf /dev/null "$node/etc/systemd/system/$unit"
done
# Docker as Kubernetes' docs set it up for the kubelet: the systemd cgroup driver (kubeadm's
# default for the kubelet; cri-dockerd reports Docker's driver to it), json-file logs. And
# gVisor (Debian's runsc) as docs/alternative-runtimes.md has users add it, for a RuntimeClass.
mkdir -p "$node/etc/docker"
cat >"$node/etc/docker/daemon.json" <<'JSON'
{
  "exec-opts": ["native.cgroupdriver=systemd"],
  "runtimes": {"gvisor": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host", "--oci-seccomp"]}},
  "log-driver": "json-file",
  "log-opts": {"max-size": "100m"},
  "storage-driver": "overlay2"
}
JSON
# This machine's runc cannot start privileged containers (runc-nosysresource says why): the
# node's runc is the wrapper, Debian's is runc.real beside it.
mv "$node/usr/sbin/runc" "$node/usr/sbin/runc.real"
install -m 755 "$HERE/runc-nosysresource" "$node/usr/sbin/runc"
# The CNI plugins where Kubernetes' kubernetes-cni package puts them and cri-dockerd looks by
# default; flannel's DaemonSet adds its own plugin there.
mkdir -p "$node/opt/cni/bin" "$node/etc/cni/net.d"
for p in "$node"/usr/lib/cni/*; do ln -s "/usr/lib/cni/${p##*/}" "$node/opt/cni/bin/${p##*/}"; done
# kubelet.service and 10-kubeadm.conf as Kubernetes' kubelet and kubeadm packages install them.
cat >"$node/lib/systemd/system/kubelet.service" <<'UNIT'
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$node/lib/systemd/system/kubelet.service.d"
cat >"$node/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" <<'UNIT'
# kubeadm's drop-in: before `kubeadm init` or `join` the kubelet has no config and restarts every
# 10 s; kubeadm writes /var/lib/kubelet/config.yaml and kubeadm-flags.env, then restarts it.
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
UNIT
ln -s /lib/systemd/system/kubelet.service "$node/etc/systemd/system/multi-user.target.wants/kubelet.service"
# The binaries run.sh mounts over these (so the units find them, as after an apt install).
for b in kubelet kubeadm kubectl; do : >"$node/usr/bin/$b" && chmod 755 "$node/usr/bin/$b"; done
tar -C "$node" --numeric-owner -cf "$part/node.tar" .
rm -rf "$node"
# --- end of the node
}

build_images() {
base=$part/base
debootstrap_root "$base" "$BASE_PACKAGES"
rm -rf "$base"/usr/share/doc "$base"/usr/share/man "$base"/usr/share/locale
base_image=cri-dockerd-cluster/base:$key
tar -C "$base" --numeric-owner -c . | docker import - "$base_image" >/dev/null
rm -rf "$base"

ctx=$part/ctx
image() { # NAME:TAG FILE... -- DOCKERFILE-LINES...
  local tag=$1
  shift
  rm -rf "$ctx" && mkdir -p "$ctx"
  while [[ $1 != -- ]]; do cp "$1" "$ctx/" && shift; done
  shift
  { echo "FROM $base_image"; printf '%s\n' "$@"; } >"$ctx/Dockerfile"
  docker build -q -t "$tag" "$ctx" >/dev/null || die "docker build $tag"
  tags+=("$tag")
}
tags=()
for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
  image "registry.k8s.io/$c:$K8S_VERSION" "$K8S_BIN/$c" -- "COPY $c /usr/local/bin/$c" "ENTRYPOINT [\"/usr/local/bin/$c\"]"
done
# etcd's image tag: the version without its v, and the image's own revision.
image "registry.k8s.io/etcd:${CLUSTER_ETCD_VERSION#v}-0" "$CLUSTER_BIN/etcd" -- "COPY etcd /usr/local/bin/etcd" 'CMD ["/usr/local/bin/etcd"]'
image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$CLUSTER_BIN/coredns" -- 'COPY coredns /coredns' 'EXPOSE 53 53/udp' 'ENTRYPOINT ["/coredns"]'
image "cri-dockerd-cluster/flannel:$FLANNEL_VERSION" "$CLUSTER_BIN/flanneld" "$CLUSTER_BIN/flannel" -- \
  'COPY flanneld /opt/bin/flanneld' 'COPY flannel /flannel' 'ENTRYPOINT ["/opt/bin/flanneld"]'
# pause: the sandbox image, FROM scratch as upstream's; 3.10.2 is kubeadm's, 3.10 cri-dockerd's
# default --pod-infra-container-image.
rm -rf "$ctx" && mkdir -p "$ctx"
(cd "$ROOT" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags '-s -w' -o "$ctx/pause" ./test/images/pause)
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
docker build -q -t registry.k8s.io/pause:3.10.2 "$ctx" >/dev/null || die "docker build pause"
docker tag registry.k8s.io/pause:3.10.2 registry.k8s.io/pause:3.10
tags+=(registry.k8s.io/pause:3.10.2 registry.k8s.io/pause:3.10)
# busybox for the test's own pods (nc, nslookup, wget, httpd), from Debian's package.
"$ROOT/hack/busybox-rootfs.sh" "$part/busybox" >/dev/null
tar -C "$part/busybox" --numeric-owner -c . | docker import -c 'CMD ["sh"]' - cri-dockerd-cluster/busybox:1 >/dev/null
tags+=(cri-dockerd-cluster/busybox:1)
rm -rf "$part/busybox"
docker save "${tags[@]}" -o "$part/images.tar"
docker rmi "${tags[@]}" "$base_image" >/dev/null
printf '%s\n' "${tags[@]}" >"$part/images.txt"
}

"build_$what"

touch "$part/.complete"
rm -rf "$out"
mv "$part" "$out"
# Older keys go: one of each is enough.
for old in "$CACHE/$what"-*; do [[ $old == "$out" || $old == *.partial ]] || rm -rf "$old"; done
log "built in $((SECONDS - start))s: $out ($(du -sh "$out" | cut -f1))"
echo "$out"
