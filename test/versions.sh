# shellcheck shell=bash
# shellcheck disable=SC2034 # a table: the scripts that source it use what they need
# The versions of everything the tests build or fetch, in one place. Every build script sources
# this file; the cache directories are keyed by these versions, so a change here builds anew.
# Where a build module under test/ pins a version in its go.mod too (or flannel's manifest names
# its image), `test/versions.sh --check` (run by make lint) fails when the two disagree.

# Kubernetes: the kubelet, kube-apiserver, kubectl, kubeadm, ... (test/e2e/build-k8s.sh), the node
# e2e suite (test/e2e-node), e2e.test for Conformance (test/cluster/conformance-build.sh).
K8S_VERSION=v1.37.2
# etcd beside the kubelet e2e's kube-apiserver (test/e2e/build-k8s.sh).
ETCD_VERSION=v3.6.16
# The kubeadm cluster's own etcd, CoreDNS and flannel: the versions kubeadm v1.37.2 pins
# (test/cluster/build.sh).
CLUSTER_ETCD_VERSION=v3.7.0
COREDNS_VERSION=v1.14.6
FLANNEL_VERSION=v0.28.10
# crictl and critest (test/critest/build-tools.sh).
CRI_TOOLS_VERSION=v1.37.0
# The second engine, Docker 29 (hack/docker29-build.sh): moby/v2 v2.0.0-beta.24 is released as
# dockerd 29.8.0; containerd at the version moby pins; runc.
MOBY_VERSION=v2.0.0-beta.24
DOCKERD_VERSION=29.8.0
CONTAINERD_VERSION=v2.3.5
RUNC_VERSION=v1.5.1
# Upstream cri-dockerd, for the benchmarks and the cluster's swap (hack/upstream.sh).
UPSTREAM_VERSION=v0.4.3
# Mutation testing (hack/mutation.sh).
GREMLINS_VERSION=v0.6.0

# --check: every build module's go.mod requires the version above.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	[[ ${1:-} == --check ]] || { echo "usage: $0 --check (or source it)" >&2; exit 2; }
	cd "$(dirname "$0")"
	bad=0
	check() { # GO_MOD MODULE VERSION
		local got
		got=$(awk -v m="$2" '($1 == m) { print $2 } ($1 == "require" && $2 == m) { print $3 }' "$1")
		if [[ $got != "$3" ]]; then
			echo "versions.sh: $1 requires $2 ${got:-(nothing)}, the table says $3" >&2
			bad=1
		fi
	}
	check e2e/k8s-build/kubernetes/go.mod k8s.io/kubernetes "$K8S_VERSION"
	check e2e-node/k8s-build/go.mod k8s.io/kubernetes "$K8S_VERSION"
	check cluster/build/conformance/go.mod k8s.io/kubernetes "$K8S_VERSION"
	check e2e/k8s-build/etcd/go.mod go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
	check cluster/build/etcd/go.mod go.etcd.io/etcd/server/v3 "$CLUSTER_ETCD_VERSION"
	check cluster/build/coredns/go.mod github.com/coredns/coredns "$COREDNS_VERSION"
	check cluster/build/flannel/go.mod github.com/flannel-io/flannel "$FLANNEL_VERSION"
	# flannel's manifest names the image test/cluster/image.sh tags with the version.
	if grep -o 'cri-dockerd-cluster/flannel:[^ "]*' cluster/flannel.yaml | grep -qv ":$FLANNEL_VERSION\$"; then
		echo "versions.sh: cluster/flannel.yaml names a flannel image other than :$FLANNEL_VERSION" >&2
		bad=1
	fi
	exit "$bad"
fi
