package apiserver

import (
	"github.com/spf13/cobra"
)

// NewCommand returns the ichor-apiserver command.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "ichor-apiserver",
		Short: "Serve the ichor.dev API as a Kubernetes aggregated API server",
		Long: `ichor-apiserver serves Ichor's API (ichor.dev/v1alpha1) behind a kube-apiserver
that delegates authentication and authorization to it through an APIService.
Without --etcd-servers it runs an embedded single-member etcd on loopback.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
