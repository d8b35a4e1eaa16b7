// Command cri-dockerd serves the Kubernetes CRI on a unix socket and runs pods on Docker.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/core"
	"github.com/cri-dockerd/cri-dockerd/internal/version"
)

func main() {
	os.Exit(run(newRootCommand(), os.Args[1:], os.Stderr))
}

// run executes the command line and answers the exit code. Every error reaches stderr here,
// once: a daemon that exits without saying why leaves a node admin guessing (and systemd's
// Restart= gives up after StartLimitBurst silent failures).
func run(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	if !errors.Is(err, errChecksFailed) {
		fmt.Fprintln(stderr, "cri-dockerd:", err)
	}
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "Run '%s --help' for the flags.\n", usage.command)
	}
	return 1
}

// usageError is a mistake in the settings (an unknown or malformed flag, a stray argument, a
// value that does not validate, a bad config file): the hint to --help follows it.
type usageError struct {
	command string
	err     error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func newRootCommand() *cobra.Command {
	cfg := config.Default()
	var configFile string
	var showVersion, showBuildInfo bool
	root := &cobra.Command{
		Use:           "cri-dockerd",
		Short:         "A Kubernetes CRI server that runs pods on the Docker Engine",
		Long:          "cri-dockerd serves the Kubernetes Container Runtime Interface on a unix socket and runs pods on the Docker Engine, passing each pod's RuntimeClass handler to Docker as its runtime.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{command: cmd.CommandPath(), err: fmt.Errorf("unexpected argument %q (settings are flags: --name=value)", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				printVersion(cmd)
				return nil
			}
			if showBuildInfo {
				printBuildInfo(cmd.OutOrStdout())
				return nil
			}
			if configFile != "" {
				if err := config.LoadFile(configFile, cmd.Flags()); err != nil {
					return usageError{command: cmd.CommandPath(), err: err}
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{command: cmd.CommandPath(), err: err}
			}
			return serve(cmd.Context(), cfg)
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{command: cmd.CommandPath(), err: err}
	})
	// Settings are persistent flags: `doctor` checks the node with the same flags as a serve.
	cfg.BindFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&configFile, "config", "", "YAML file with settings named as the flags (flags given on the command line win)")
	root.Flags().BoolVar(&showVersion, "version", false, "print the version and exit")
	root.Flags().BoolVar(&showBuildInfo, "buildinfo", false, "print the program, version, git commit and Go version, as upstream, and exit")
	root.AddCommand(newDoctorCommand(cfg, &configFile))
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version, git commit and CRI API version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { printVersion(cmd) },
	})
	return root
}

func printVersion(cmd *cobra.Command) {
	fmt.Fprintf(cmd.OutOrStdout(), "cri-dockerd %s (%s)\nCRI API: %s (k8s.io/cri-api %s)\n", version.Version, version.GitCommit, core.CRIAPIVersion, criAPIModuleVersion())
}

// printBuildInfo prints upstream's --buildinfo lines, which scripts parse.
func printBuildInfo(w io.Writer) {
	fmt.Fprintf(w, "Program: cri-dockerd\nVersion: %s\nGitCommit: %s\nGo version: %s\n", version.Version, version.GitCommit, runtime.Version())
}

// criAPIModuleVersion reads the cri-api module version from the build info.
func criAPIModuleVersion() string {
	_ = runtimeapi.RuntimeReady
	return moduleVersion("k8s.io/cri-api")
}
