package controller

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// NewCommand returns the ichor-controller command.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "ichor-controller",
		Short: "Reconcile Ichor's Talos clusters and machines",
		Long: `ichor-controller is the only component of Ichor that talks to Talos nodes: it
takes machines in (pinning each one's maintenance certificate), scans the
provisioning networks, and keeps every TalosCluster's secrets bundle.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			logger := zap.New(zap.UseFlagOptions(&o.Log))
			ctrl.SetLogger(logger)
			klog.SetLogger(logger.WithName("klog"))
			cfg, err := config.GetConfig()
			if err != nil {
				return err
			}
			return o.Run(cmd.Context(), cfg)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
