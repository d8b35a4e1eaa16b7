package core

import (
	"context"
	"path"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// dockerCgroupParent is the kubelet's cgroup_parent as Docker's cgroup driver takes it.
//
// The kubelet's systemd driver names a pod's slice by its whole path
// (/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice). Docker's systemd
// driver takes the slice's name alone, which systemd places by its dashes at that same path
// (runc refuses a name with '/': "invalid slice name"); upstream's dockershim passed the last
// component too. A cgroupfs path there would be refused by Docker with a message that does not
// say what to change, so it is refused here with one. Docker's cgroupfs driver takes any path.
func (s *Service) dockerCgroupParent(ctx context.Context, parent string) (string, error) {
	if parent == "" {
		return "", nil
	}
	info, err := s.runtimes.get(ctx)
	if err != nil || info.CgroupDriver != "systemd" {
		return parent, nil
	}
	slice := path.Base(parent)
	if !strings.HasSuffix(slice, ".slice") || slice == ".slice" {
		return "", status.Errorf(codes.FailedPrecondition, "cgroup_parent %q is not a systemd slice, and Docker uses the systemd cgroup driver: set the kubelet's cgroupDriver to systemd, or leave it unset so that the kubelet takes it from RuntimeConfig", parent)
	}
	if strings.Contains(parent, "/") {
		if want := slicePath(slice); path.Clean("/"+parent) != want {
			return "", invalidf("cgroup_parent %q: systemd places the slice %s at %s", parent, slice, want)
		}
	}
	return slice, nil
}

// slicePath is where systemd puts a slice: each dash opens a level, so a-b-c.slice is
// /a.slice/a-b.slice/a-b-c.slice (systemd.slice(5)).
func slicePath(slice string) string {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "-" {
		return "/"
	}
	var out strings.Builder
	for i := range name {
		if name[i] == '-' {
			out.WriteString("/" + name[:i] + ".slice")
		}
	}
	out.WriteString("/" + slice)
	return out.String()
}
