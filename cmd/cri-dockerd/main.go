// Command cri-dockerd serves the Kubernetes CRI on a unix socket and runs pods on Docker.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/config"
	"github.com/cri-dockerd/cri-dockerd/core"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	cfg := config.Default()
	var configFile string
	var showVersion bool
	root := &cobra.Command{
		Use:           "cri-dockerd",
		Short:         "A Kubernetes CRI server that runs pods on the Docker Engine",
		Long:          "cri-dockerd serves the Kubernetes Container Runtime Interface on a unix socket and runs pods on the Docker Engine, passing each pod's RuntimeClass handler to Docker as its runtime.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				printVersion(cmd)
				return nil
			}
			if configFile != "" {
				if err := config.LoadFile(configFile, cmd.Flags()); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "cri-dockerd:", err)
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "cri-dockerd:", err)
				return err
			}
			if err := serve(cmd.Context(), cfg); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "cri-dockerd:", err)
				return err
			}
			return nil
		},
	}
	// Settings are persistent flags: `doctor` checks the node with the same flags as a serve.
	cfg.BindFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&configFile, "config", "", "YAML file with settings named as the flags (flags given on the command line win)")
	root.Flags().BoolVar(&showVersion, "version", false, "print the version and exit")
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
	fmt.Fprintf(cmd.OutOrStdout(), "cri-dockerd %s (%s)\nCRI API: %s (k8s.io/cri-api %s)\n", core.Version, core.GitCommit, core.CRIAPIVersion, criAPIModuleVersion())
}

// criAPIModuleVersion reads the cri-api module version from the build info.
func criAPIModuleVersion() string {
	_ = runtimeapi.RuntimeReady
	return moduleVersion("k8s.io/cri-api")
}
