package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cri-dockerd/cri-dockerd/internal/config"
	"github.com/cri-dockerd/cri-dockerd/internal/doctor"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// errChecksFailed makes the command exit non-zero after it printed the failed checks.
var errChecksFailed = errors.New("some checks failed")

func newDoctorCommand(cfg *config.Config, configFile *string) *cobra.Command {
	var output, kubeletConfig string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this node for what cri-dockerd needs (Docker, runtimes, handlers, images, CNI, socket)",
		Long: "doctor checks Docker and its API version, the cgroup driver, every Docker runtime (binary present, executable, " +
			"not a directory) and runtime handler alias, whether Docker's own log of each container is bounded, the pod infra image, CNI config and plugins, the CRI socket and " +
			"whether negative OOM scores are allowed, and the kubelet's config file (PodAndContainerStatsFromCRI). " +
			"Info lines say what Docker cannot give a pod at all. It prints one line per check and exits non-zero when a check fails. " +
			"It takes the same flags and --config as the daemon.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError{command: cmd.CommandPath(), err: fmt.Errorf("--output %q: want text or json", output)}
			}
			if *configFile != "" {
				if err := config.LoadFile(*configFile, cmd.Flags()); err != nil {
					return usageError{command: cmd.CommandPath(), err: err}
				}
			}
			docker, err := libdocker.New(libdocker.Options{Endpoint: cfg.DockerEndpoint, RequestTimeout: cfg.RuntimeRequestTimeout})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), cfg.RuntimeRequestTimeout)
			defer cancel()
			checks := doctor.Run(ctx, docker, cfg)
			checks = append(checks, doctor.KubeletChecks(kubeletConfig)...)
			checks = append(checks, doctor.LimitChecks()...)
			if err := doctor.Print(cmd.OutOrStdout(), checks, output == "json"); err != nil {
				return err
			}
			if doctor.Failed(checks) {
				return errChecksFailed
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (one line per check) or json")
	cmd.Flags().StringVar(&kubeletConfig, "kubelet-config", doctor.DefaultKubeletConfig, "the kubelet's config file, checked for the feature gates a Docker node needs")
	return cmd
}
