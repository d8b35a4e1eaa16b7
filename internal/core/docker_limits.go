package core

// What Docker Engine cannot give a pod, worded once: the errors pods get, `cri-dockerd
// doctor` and the README's table all say it this way.
const (
	userNamespaceRefusal = "Docker cannot give a pod its own user namespace (only the daemon-wide userns-remap)"
	strictGroupsRefusal  = "supplemental_groups_policy Strict: Docker always adds the groups the image's /etc/group gives the user (policy Merge)"
	mountOptionsRefusal  = "Docker cannot apply mount_options to a bind"
)

// DockerLimit is a pod feature Docker cannot give, and what a pod that asks for it gets.
type DockerLimit struct {
	Feature, Outcome string
}

// DockerLimits lists them.
func DockerLimits() []DockerLimit {
	return []DockerLimit{
		{"user namespaces per pod (hostUsers: false)", "RunPodSandbox fails, Unimplemented: user namespace mode POD: " + userNamespaceRefusal},
		{"procMount: Unmasked", "it reaches cri-dockerd as empty masked and read-only paths, which keep Docker's masks (the CRI cannot tell them from unset ones); Kubernetes asks hostUsers: false with it, which fails as above"},
		{"supplementalGroupsPolicy: Strict", "the kubelet rejects the pod (SupplementalGroupsPolicyNotSupported: Status reports the feature off); a CRI call with it fails, Unimplemented: " + strictGroupsRefusal},
		{"mount options (noexec, nodev, nosuid)", "CreateContainer fails, InvalidArgument: mount ...: mount option \"noexec\": " + mountOptionsRefusal + " (Status reports features.mount_options off)"},
		{"a split image filesystem (images apart from containers' writable layers)", "not possible: Docker keeps both under its one data root, and ImageFsInfo reports both there"},
	}
}
