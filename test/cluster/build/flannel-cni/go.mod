// Builds the flannel CNI plugin, which turns flanneld's /run/flannel/subnet.env into a bridge
// network for each pod. It lived in containernetworking/plugins until v1.0.0
// (plugins/meta/flannel); its successor, github.com/flannel-io/cni-plugin, is not served by the
// module proxy here. A module of its own (test/cluster/build.sh).
module cri-dockerd.local/cluster/build/flannel-cni

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
