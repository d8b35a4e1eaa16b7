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
		{[]string{"--hairpin-mode=on"}, []string{`--hairpin-mode "on"`}},
		{[]string{"--container-runtime-endpoint=tcp://127.0.0.1:3735"}, []string{"tcp endpoints are not served on Linux"}},
		{[]string{"--config=/nonexistent/cri-dockerd.yaml"}, []string{"config file", "/nonexistent/cri-dockerd.yaml"}},
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
