package procuser

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const containerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeProc makes proc/PID with the given cgroup and status files, and exe linked to exe.
func fakeProc(t *testing.T, pid, cgroup, status, exe string) string {
	t.Helper()
	proc := t.TempDir()
	dir := filepath.Join(proc, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"cgroup": cgroup, "status": status} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
	return proc
}

const status1000 = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t1000\t1000\t1000\nGid:\t3000\t3000\t3000\t3000\nFDSize:\t64\nGroups:\t10 3000 50000 \nNStgid:\t7\n"

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, status, exe string
		want                      User
		wantErr                   string
	}{
		{"systemd driver", "0::/system.slice/docker-" + containerID + ".scope\n", status1000, "/bin/sleep",
			User{UID: 1000, GID: 3000, Groups: []int64{10, 3000, 50000}}, ""},
		{"cgroup v1, no groups", "12:memory:/docker/" + containerID + "\n1:name=systemd:/docker/" + containerID + "\n",
			"Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n", "/bin/sh", User{}, ""},
		{"another container's process", "0::/system.slice/docker-ffff.scope\n", status1000, "/bin/sleep", User{}, "no cgroup of container"},
		{"a gVisor sandbox", "0::/docker/" + containerID + "\n", status1000, "/usr/local/bin/runsc", User{}, "gVisor"},
		{"no Gid line", "0::/docker/" + containerID + "\n", "Uid:\t0\t0\t0\t0\n", "/bin/sh", User{}, "no Uid or Gid"},
		{"a bad group", "0::/docker/" + containerID + "\n", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t1 x\n", "/bin/sh", User{}, `"Groups:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := fakeProc(t, "4242", tc.cgroup, tc.status, tc.exe)
			got, err := Read(proc, 4242, containerID)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read: %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Read: %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := Read(t.TempDir(), 4242, containerID); err == nil {
		t.Error("Read of a process that is gone: no error")
	}
	if _, err := Read(t.TempDir(), 0, containerID); err == nil {
		t.Error("Read of pid 0: no error")
	}
}

func TestCache(t *testing.T) {
	var c Cache
	if _, ok := c.Get("a"); ok {
		t.Fatal("empty cache has a")
	}
	c.Put("a", User{UID: 5})
	if u, ok := c.Get("a"); !ok || u.UID != 5 {
		t.Fatalf("Get(a) = %+v, %v", u, ok)
	}
	c.Forget("a")
	if _, ok := c.Get("a"); ok {
		t.Fatal("a kept after Forget")
	}
}
