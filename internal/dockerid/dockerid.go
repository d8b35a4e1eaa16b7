// Package dockerid tells a whole Docker object ID from a prefix or a name.
package dockerid

// IsFull reports whether id is a whole Docker ID (64 lower-case hex digits), as the kubelet
// sends them and as cgroup paths end; prefixes and names are Docker's to resolve.
func IsFull(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, r := range id {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
