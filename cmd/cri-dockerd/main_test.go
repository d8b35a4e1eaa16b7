package main

import (
	"bytes"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// Every failure of the command line reaches stderr, names the flag and exits non-zero.
func TestCommandLineErrorsReachStderr(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--no-such-flag"}, []string{"unknown flag: --no-such-flag", "Run 'cri-dockerd --help'"}},
		{[]string{"--pod-cidr"}, []string{"flag needs an argument: --pod-cidr", "--help"}},
		{[]string{"--ipv6-dual-stack=maybe"}, []string{`"--ipv6-dual-stack"`, "--help"}},
		{[]string{"serve-please"}, []string{`unexpected argument "serve-please"`, "--help"}},
		{[]string{"--hairpin-mode=on"}, []string{`--hairpin-mode "on"`, "Run 'cri-dockerd --help'"}},
		{[]string{"--container-runtime-endpoint=tcp://127.0.0.1:3735"}, []string{"tcp endpoints are not served on Linux", "--help"}},
		{[]string{"--config=/nonexistent/cri-dockerd.yaml"}, []string{"config file", "/nonexistent/cri-dockerd.yaml", "--help"}},
		{[]string{"doctor", "--output=xml"}, []string{`--output "xml"`, "Run 'cri-dockerd doctor --help'"}},
		{[]string{"doctor", "--bogus"}, []string{"unknown flag: --bogus", "Run 'cri-dockerd doctor --help'"}},
	} {
		var stderr bytes.Buffer
		root := newRootCommand()
		var stdout bytes.Buffer
		root.SetOut(&stdout)
		if code := run(root, tc.args, &stderr); code == 0 {
			t.Errorf("%v: exit 0, want non-zero", tc.args)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), w)
			}
		}
	}
}

// --buildinfo prints upstream's four lines.
func TestBuildInfo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	root := newRootCommand()
	root.SetOut(&stdout)
	if code := run(root, []string{"--buildinfo"}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	re := regexp.MustCompile(`^Program: cri-dockerd\nVersion: \S+\nGitCommit: \S+\nGo version: ` + regexp.QuoteMeta(runtime.Version()) + `\n$`)
	if !re.MatchString(stdout.String()) {
		t.Errorf("--buildinfo printed %q", stdout.String())
	}
}

// Every flag upstream cri-dockerd v0.4.3 registers (cmd/cri/options, config/options.go and
// cmd/server.go there) is one of ours.
func TestEveryUpstreamFlagIsAccepted(t *testing.T) {
	root := newRootCommand()
	for _, name := range []string{
		"container-runtime-endpoint", "runtime-cgroups", "cri-dockerd-root-directory", "pod-infra-container-image",
		"docker-endpoint", "image-pull-progress-deadline", "runtime-request-timeout", "streaming-bind-addr",
		"pod-cidr", "ipv6-dual-stack", "network-plugin", "cni-conf-dir", "cni-bin-dir", "cni-cache-dir",
		"network-plugin-mtu", "hairpin-mode", "help", "version", "buildinfo", "log-level",
	} {
		if root.Flags().Lookup(name) == nil && root.PersistentFlags().Lookup(name) == nil && name != "help" {
			t.Errorf("--%s is not accepted", name)
		}
	}
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	if code := run(root, []string{"-h"}, &stderr); code != 0 || !strings.Contains(stdout.String(), "--pod-cidr") {
		t.Errorf("-h: exit %d, output %q", code, stdout.String()+stderr.String())
	}
}
