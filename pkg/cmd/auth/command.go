package auth

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// NewCommand returns the ichor-auth command.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "ichor-auth",
		Short: "Sign IchorUsers in: Ichor's token issuer, trusted by kube-apiserver",
		Long: `ichor-auth is Ichor's OpenID token issuer for IchorUsers. A user signs in with a
password (ichor login); ichor-apiserver checks it, and ichor-auth answers with a
short-lived token that kube-apiserver accepts through its structured
authentication configuration (user ichor:<name>, group ichor:<role>), and a
refresh token. It holds no right but to check passwords, read users, and keep
its own two Secrets.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			// client-go and the certificate watcher log through klog and logr.
			ctrllog.SetLogger(klog.NewKlogr())
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
