package kerneloom

import (
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
)

const id = "3b66a59fe0db4da6ea0781be9e21ab042e6b8ba37af63a3f32e6d1ec74954a3d"

// The record a gVisor sandbox's kill left (Debian 12's kernel, cgroup v1, Docker's cgroupfs
// driver), as /dev/kmsg gives it.
const cgroupfsRecord = "6,2451,255612345,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=" + id +
	",mems_allowed=0,oom_memcg=/docker/" + id + ",task_memcg=/docker/" + id + ",task=exe,pid=4018,uid=0"

func TestContainerIDOfEachCgroupDriversPath(t *testing.T) {
	for _, tc := range []struct {
		name, record, want string
		ok                 bool
	}{
		{"cgroupfs", cgroupfsRecord, id, true},
		{"kubelet cgroupfs", "6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/kubepods/burstable/pod1f0e,task_memcg=/kubepods/burstable/pod1f0e/" + id + ",task=sh,pid=7,uid=0", id, true},
		{"systemd", "6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods.slice/kubepods-besteffort.slice,task_memcg=/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1f0e.slice/docker-" + id + ".scope,task=sh,pid=7,uid=0", id, true},
		{"the node ran out of memory, not a container", "6,1,2,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/docker.service,task=dockerd,pid=9,uid=0", "", false},
		{"another record", "6,1,2,-;Memory cgroup out of memory: Killed process 4018 (exe)", "", false},
		{"an ID too short", "6,1,2,-;oom-kill:task_memcg=/docker/3b66a59fe0db,task=sh", "", false},
		{"upper-case hex is no Docker ID", "6,1,2,-;oom-kill:task_memcg=/docker/" + strings.ToUpper(id), "", false},
	} {
		got, ok := ContainerID(tc.record)
		if got != tc.want && tc.ok || ok != tc.ok {
			t.Errorf("%s: ContainerID = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// kmsg reads like /dev/kmsg: one record per read, EPIPE where records were lost, then an error.
type kmsg struct {
	reads []string
	end   error
}

func (k *kmsg) Read(p []byte) (int, error) {
	if len(k.reads) == 0 {
		return 0, k.end
	}
	r := k.reads[0]
	k.reads = k.reads[1:]
	if r == "EPIPE" {
		return 0, syscall.EPIPE
	}
	return copy(p, r), nil
}

func TestFollowTellsEachKillAndGoesOnPastLostRecords(t *testing.T) {
	other := strings.Repeat("ab", 32)
	r := &kmsg{reads: []string{
		"6,1,2,-;eth0: link up\n",
		cgroupfsRecord + "\n",
		"EPIPE",
		"6,5,6,-;oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/docker/" + other + ",task=sh,pid=7,uid=0\n",
	}, end: io.ErrClosedPipe}
	var got []string
	err := Follow(r, func(id string) { got = append(got, id) })
	if err != io.ErrClosedPipe {
		t.Errorf("Follow returned %v, want the reader's error", err)
	}
	if want := []string{id, other}; !slices.Equal(got, want) {
		t.Errorf("killed = %q, want %q", got, want)
	}
}

func TestFollowReadsSeveralRecordsInOneRead(t *testing.T) {
	var got []string
	err := Follow(strings.NewReader("6,1,2,-;boot\n"+cgroupfsRecord+"\n"), func(id string) { got = append(got, id) })
	if err != io.EOF {
		t.Errorf("Follow returned %v, want io.EOF", err)
	}
	if !slices.Equal(got, []string{id}) {
		t.Errorf("killed = %q, want %q", got, id)
	}
}
