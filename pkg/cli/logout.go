package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newLogout(o *Options) *cobra.Command {
	var f signInFlags
	cmd := &cobra.Command{
		Use:   "logout --issuer URL [--oidc] --username USER",
		Short: "End the sign-in at the issuer and forget its tokens",
		Long: `logout ends the session at Ichor's token issuer, so that its refresh token renews nothing
any more, and removes it from ~/.ichor/tokens/. A token already handed to kubectl stays valid
until it expires (minutes).`,
		GroupID: "access",
		Args:    cobra.NoArgs,
	}
	f.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path, s, unlock, err := f.open(cmd)
		if err != nil {
			return err
		}
		defer unlock()
		if s == nil {
			fmt.Fprintf(o.Out, "Not signed in to %s.\n", f.issuer)
			return nil
		}
		// Ichor's issuer ends the session; an OpenID provider's session
		// is the provider's to end (sign out there), and its tokens here
		// are forgotten.
		if s.ClientID == "" {
			c, err := newIssuerClient(cmd.Context(), s.Issuer, s.CertificateAuthority)
			if err != nil {
				return err
			}
			if err := c.end(cmd.Context(), s.RefreshToken); err != nil {
				return err
			}
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		if s.ClientID != "" {
			fmt.Fprintf(o.Out, "Signed out of %s here: its tokens are forgotten; your session at the provider is the provider's to end.\n", f.issuer)
			return nil
		}
		fmt.Fprintf(o.Out, "Signed out of %s.\n", f.issuer)
		return nil
	}
	return cmd
}
