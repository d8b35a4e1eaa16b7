package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker's errors for starts that the runtime or the kernel refused, verbatim as the Go client
// returned them (err.Error() of ContainerStart) on this project's test machines (Linux 6.18,
// cgroup v1 with hugetlb on the v2 hierarchy, no CAP_SYS_RESOURCE): Docker 20.10.24 with
// containerd 1.6 and runc 1.1.5, Docker 29.8.0 with containerd 2.3.5 and runc 1.5.1, Debian's
// runsc 20221219 and crun 1.8.1.
const (
	gvisorRootNetNS2010  = `Error response from daemon: OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/15748/ns/net": cannot run with network enabled in root network namespace: unknown`
	gvisorRootNetNS29    = `Error response from daemon: OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/8889/ns/net": cannot run with network enabled in root network namespace`
	crunHybrid2010       = `Error response from daemon: failed to create shim task: OCI runtime create failed: cgroups in hybrid mode not supported, drop all controllers from cgroupv2: unknown`
	crunUnknownVersion29 = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: unknown version specified`
	runcNotInPath2010    = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "nosuchcmd": executable file not found in $PATH: unknown`
	runcNotInPath29      = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "nosuchcmd": executable file not found in $PATH`
	runcExecDir2010      = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/etc": permission denied: unknown`
	runcExecDir29        = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "/etc": is a directory: permission denied`
	runcNoSuchFile2010   = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/no/such/bin": stat /no/such/bin: no such file or directory: unknown`
	runcNoSuchFile29     = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "/no/such/bin": stat /no/such/bin: no such file or directory`
	runcOOM2010          = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: can't get final child's PID from pipe: EOF: unknown`
	runcOOM29            = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: can't get final child's PID from pipe: EOF; runc init error(s): nsexec[17739]: failed to update /proc/self/oom_score_adj: Permission denied`
	runcCaps2010         = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: unable to apply caps: operation not permitted: unknown`
	runcSysctl2010       = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: open /proc/sys/net/ipv4/no_such_sysctl: no such file or directory: unknown`
	runcSysctl29         = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: open sysctl net.ipv4.no_such_sysctl file: unsafe procfs detected: openat2 fsmount:fscontext:proc/./sys/net/ipv4/no_such_sysctl: no such file or directory`
	runcMountType2010    = `Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting "/etc/hostname" to rootfs at "/etc": mount /etc/hostname:/etc (via /proc/self/fd/6), flags: 0x5000: not a directory: unknown: Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type`
	runcMountType29      = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting "/etc/hostname" to rootfs at "/etc": mount src=/etc/hostname, dst=/etc, dstFd=/proc/thread-self/fd/16, flags=MS_BIND|MS_REC: not a directory: Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type`
)

func TestExplainRuntimeErrorReadsTheRuntimesWords(t *testing.T) {
	controllers := func() string { return "hugetlb" }
	for _, tc := range []struct {
		name, msg string
		cause     []string // fragments of the cause
		fix       string   // a fragment of the fix; "" for none
	}{
		{"gvisor root netns, 20.10", gvisorRootNetNS2010, []string{"--network=sandbox", `"cannot run with network enabled in root network namespace"`, "gVisor issue 10704"}, `"runtimeArgs": ["--network=host"]`},
		{"gvisor root netns, 29", gvisorRootNetNS29, []string{"--network=sandbox", "root network namespace"}, `"--network=host"`},
		{"crun hybrid cgroups", crunHybrid2010, []string{"crun", `"cgroups in hybrid mode not supported, drop all controllers from cgroupv2"`, "/sys/fs/cgroup/unified: hugetlb"}, "systemd.unified_cgroup_hierarchy=1"},
		{"crun and Docker 29's spec", crunUnknownVersion29, []string{`"unknown version specified"`, "version of the OCI spec"}, "newer release"},
		{"command not in PATH, 20.10", runcNotInPath2010, []string{`command "nosuchcmd" is not in the image's $PATH`}, "command"},
		{"command not in PATH, 29", runcNotInPath29, []string{`command "nosuchcmd" is not in the image's $PATH`}, "command"},
		{"command is a directory, 20.10", runcExecDir2010, []string{`command "/etc" cannot be executed`, `"permission denied"`}, "command"},
		{"command is a directory, 29", runcExecDir29, []string{`command "/etc" cannot be executed`}, "command"},
		{"command missing, 20.10", runcNoSuchFile2010, []string{`command "/no/such/bin" does not exist in the image`}, "command"},
		{"command missing, 29", runcNoSuchFile29, []string{`command "/no/such/bin" does not exist in the image`}, "command"},
		{"oom score, 20.10", runcOOM2010, []string{`"can't get final child's PID from pipe: EOF"`, "oom_score_adj", "CAP_SYS_RESOURCE"}, ""},
		{"oom score, 29", runcOOM29, []string{"negative oom_score_adj", `"failed to update /proc/self/oom_score_adj: Permission denied"`, "CAP_SYS_RESOURCE"}, ""},
		{"capabilities", runcCaps2010, []string{`"unable to apply caps: operation not permitted"`, "bounding set"}, ""},
		{"sysctl, 20.10", runcSysctl2010, []string{"no sysctl net.ipv4.no_such_sysctl "}, "securityContext.sysctls"},
		{"sysctl, 29", runcSysctl29, []string{"no sysctl net.ipv4.no_such_sysctl "}, "securityContext.sysctls"},
		{"file onto a directory, 20.10", runcMountType2010, []string{`mount of "/etc/hostname" at "/etc"`, `"not a directory"`}, "host path"},
		{"file onto a directory, 29", runcMountType29, []string{`mount of "/etc/hostname" at "/etc"`}, "host path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := explainRuntimeError(tc.msg, controllers)
			for _, f := range tc.cause {
				if !strings.Contains(r.cause, f) {
					t.Errorf("cause %q does not say %q", r.cause, f)
				}
			}
			if tc.fix == "" && r.fix != "" || !strings.Contains(r.fix, tc.fix) {
				t.Errorf("fix %q, want one with %q", r.fix, tc.fix)
			}
			for _, noise := range []string{"Error response from daemon", "OCI runtime", "failed to create shim task", ": unknown", "\n"} {
				if strings.Contains(r.cause+r.fix, noise) {
					t.Errorf("%q repeats Docker's layers (%q)", r.cause+"; "+r.fix, noise)
				}
			}
		})
	}
}

// A refusal no rule knows is the runtime's innermost message, without the layers Docker,
// containerd and runc wrap around it.
func TestExplainRuntimeErrorStripsDockersLayers(t *testing.T) {
	const msg = `Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: something new: unknown`
	if got, want := explainRuntimeError(msg, func() string { return "" }).cause, "the runtime failed: something new"; got != want {
		t.Errorf("cause %q, want %q", got, want)
	}
	// crun's refusal without controllers to name.
	if got := explainRuntimeError(crunHybrid2010, func() string { return "" }).cause; strings.Contains(got, "unified:") {
		t.Errorf("cause %q names controllers it did not find", got)
	}
}

func TestCgroupV2Controllers(t *testing.T) {
	dir := t.TempDir()
	if got := cgroupV2Controllers(dir); got != "" {
		t.Errorf("no cgroup.controllers: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("hugetlb rdma\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cgroupV2Controllers(dir); got != "hugetlb rdma" {
		t.Errorf("controllers %q", got)
	}
}

// RunPodSandbox on a runtime that refuses the start answers one line with the handler, the
// runtime and its binary, the cause and the fix, and leaves no container.
func TestRunPodSandboxRefusedStartIsOneLineWithTheFix(t *testing.T) {
	fake := libdocker.NewFake()
	runsc := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake.AddRuntime("gvisor-sandbox", runsc)
	s := newTestService(t, fake, Options{})
	fake.InjectError("StartContainer", errors.New(gvisorRootNetNS2010))
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("p"), RuntimeHandler: "gvisor-sandbox"})
	wantCode(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{`start sandbox "k8s_POD_p_`, `runtime handler "gvisor-sandbox" (Docker runtime "gvisor-sandbox", ` + runsc + `)`, "root network namespace", `"runtimeArgs": ["--network=host"]`, "reload dockerd"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	for _, noise := range []string{"Error response from daemon", "OCI runtime start failed", "/proc/15748", "\n"} {
		if strings.Contains(msg, noise) {
			t.Errorf("error %q repeats Docker's text (%q)", msg, noise)
		}
	}
	if n := len(fake.Containers()); n != 0 {
		t.Errorf("%d containers left behind", n)
	}
}

// StartContainer names the default runtime when the pod has no handler.
func TestStartContainerRefusedStartNamesTheDefaultRuntime(t *testing.T) {
	fake := libdocker.NewFake()
	s := newTestService(t, fake, Options{})
	podID, podCfg := runPod(t, s, "p", "")
	id := createContainer(t, s, podID, podCfg, "c")
	fake.InjectError("StartContainer", errors.New(runcNotInPath2010))
	_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	wantCode(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	want := fmt.Sprintf(`start container %q: runtime handler "(default)" (Docker runtime "runc", runc): the container's command "nosuchcmd" is not in the image's $PATH ("executable file not found in $PATH"); fix the container's command or the image's entrypoint`, id)
	if msg != want {
		t.Errorf("error\n %q\nwant\n %q", msg, want)
	}
}
