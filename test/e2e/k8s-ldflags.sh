# shellcheck shell=bash
# Sourced by the Kubernetes builds (test/e2e/build-k8s.sh, test/e2e-node/build.sh,
# test/cluster/conformance-build.sh): the -ldflags that stamp a build with its release version,
# as Kubernetes' own build does, so the kubelet, kubeadm and the e2e suites report VERSION
# (kubeadm checks the kubelet's and the control plane's against its own).
k8s_version_ldflags() { # VERSION (v1.N.P) -> the -ldflags string on stdout
  local minor=${1#v1.} pkg flags="-s -w"
  minor=${minor%%.*}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}
