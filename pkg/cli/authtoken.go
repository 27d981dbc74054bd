package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

func newAuth(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "auth",
		Short:   "Tokens for kubectl (an exec credential plugin)",
		GroupID: "access",
	}
	cmd.AddCommand(newAuthToken(o))
	return cmd
}

// renewBefore is how long before its expiry a token is renewed.
const renewBefore = 30 * time.Second

func newAuthToken(o *Options) *cobra.Command {
	var f signInFlags
	cmd := &cobra.Command{
		Use:   "token --issuer URL [--oidc] --username USER",
		Short: "Print the signed-in user's token as kubectl's exec credential plugin",
		Long: `token prints, as a client.authentication.k8s.io/v1 ExecCredential, the token of the sign-in
"ichor login" kept, renewed with its refresh token when it is about to expire (one renewal at a
time, however many kubectl commands run). The kubeconfig user that "ichor login" writes runs it.
When the session has ended (signed out, the user disabled or its password changed), it says so
and how to sign in again.`,
		Args: cobra.NoArgs,
	}
	f.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path, s, unlock, err := f.open(cmd)
		if err != nil {
			return err
		}
		defer unlock()
		if s == nil {
			return fmt.Errorf("not signed in to %s: run %s", f.issuer, f.loginHint())
		}
		if time.Until(s.Expiry) < renewBefore {
			renewed, err := renewSignIn(cmd, s)
			var ended *sessionEndedError
			switch {
			case errors.As(err, &ended):
				_ = os.Remove(path)
				return fmt.Errorf("your Ichor session has ended (%s): run %s", ended.why, f.loginHint())
			case err != nil && time.Now().Before(s.Expiry):
				// The issuer is away; the token still works a little longer.
				fmt.Fprintf(o.ErrOut, "warning: the token was not renewed: %v\n", err)
			case err != nil:
				return fmt.Errorf("the token expired and was not renewed: %w", err)
			default:
				if err := writeSignIn(path, renewed); err != nil {
					return err
				}
				s = renewed
			}
		}
		exp := metav1.NewTime(s.Expiry)
		return json.NewEncoder(o.Out).Encode(&clientauthv1.ExecCredential{
			TypeMeta: metav1.TypeMeta{APIVersion: clientauthv1.SchemeGroupVersion.String(), Kind: "ExecCredential"},
			Status:   &clientauthv1.ExecCredentialStatus{Token: s.IDToken, ExpirationTimestamp: &exp},
		})
	}
	return cmd
}

// renewSignIn renews s at its issuer.
func renewSignIn(cmd *cobra.Command, s *signIn) (*signIn, error) {
	var renewed *signIn
	if s.ClientID != "" {
		c, err := newOIDCClient(cmd.Context(), s.Issuer, s.ClientID, s.CertificateAuthority)
		if err != nil {
			return nil, err
		}
		if renewed, err = c.renew(cmd.Context(), s); err != nil {
			return nil, err
		}
	} else {
		c, err := newIssuerClient(cmd.Context(), s.Issuer, s.CertificateAuthority)
		if err != nil {
			return nil, err
		}
		if renewed, err = c.renew(cmd.Context(), s); err != nil {
			return nil, err
		}
	}
	renewed.CertificateAuthority = s.CertificateAuthority
	return renewed, nil
}
