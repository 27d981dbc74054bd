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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// signInFlags name a sign-in: the issuer and the user.
type signInFlags struct {
	issuer, username string
}

func (f *signInFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.issuer, "issuer", "", "Ichor's token issuer (ichor-auth), as kube-apiserver's authentication configuration names it")
	cmd.Flags().StringVar(&f.username, "username", "", "the IchorUser")
	_ = cmd.MarkFlagRequired("issuer")
	_ = cmd.MarkFlagRequired("username")
}

// loginHint is the command that signs the user in again.
func (f *signInFlags) loginHint() string {
	return fmt.Sprintf("ichor login --issuer %s --username %s", f.issuer, f.username)
}

func newLogin(o *Options) *cobra.Command {
	var (
		f                    signInFlags
		caFile, passwordFile string
		noKubeconfig         bool
	)
	cmd := &cobra.Command{
		Use:   "login --issuer URL --username USER",
		Short: "Sign in as an IchorUser and set up kubectl to act as you",
		Long: `login signs an IchorUser in at Ichor's token issuer with a password (prompted without echo; for
automation, from --password-file or ` + PasswordEnv + `). It keeps the session in ~/.ichor/tokens/
(readable by you only) and writes a kubeconfig user ichor:USER, and a context of the same name
for the current context's cluster (or --cluster), that runs "ichor auth token": the kubeconfig
holds no secret. kube-apiserver then knows you as ichor:USER in the group ichor:<your role>.`,
		Example: `  ichor login --issuer https://ichor-auth.example.net --username dana
  kubectl auth whoami`,
		GroupID: "access",
		Args:    cobra.NoArgs,
	}
	f.add(cmd)
	cmd.Flags().StringVar(&caFile, "issuer-certificate-authority", "", "PEM file of the CA of the issuer's serving certificate, when the system does not trust it")
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "read the password from this file (its first line)")
	cmd.Flags().BoolVar(&noKubeconfig, "no-kubeconfig", false, "only sign in; leave the kubeconfig as it is")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var ca string
		if caFile != "" {
			b, err := os.ReadFile(caFile)
			if err != nil {
				return err
			}
			ca = string(b)
		}
		password, err := readSecret(o, passwordFile, secretInput{what: "password", prompt: "Password for " + f.username, env: PasswordEnv})
		if err != nil {
			return err
		}
		c, err := newIssuerClient(cmd.Context(), f.issuer, ca)
		if err != nil {
			return err
		}
		s, err := c.signIn(cmd.Context(), f.username, password)
		if err != nil {
			var ended *sessionEndedError
			if errors.As(err, &ended) {
				return fmt.Errorf("sign-in refused: %s", ended.why)
			}
			return err
		}
		s.CertificateAuthority = ca
		path, err := signInPath(f.issuer, f.username)
		if err != nil {
			return err
		}
		unlock, err := lockSignIn(path)
		if err != nil {
			return err
		}
		previous, _ := readSignIn(path)
		err = writeSignIn(path, s)
		unlock()
		if err != nil {
			return err
		}
		// The sign-in this one replaces ends at the issuer too.
		if previous != nil && previous.RefreshToken != "" {
			if err := c.end(cmd.Context(), previous.RefreshToken); err != nil {
				fmt.Fprintf(o.ErrOut, "warning: the previous session was not ended: %v\n", err)
			}
		}
		fmt.Fprintf(o.Out, "Signed in to %s as %s; the token is renewed until the session ends.\n", f.issuer, f.username)
		if noKubeconfig {
			return nil
		}
		name, cluster, err := writeExecUser(o, &f)
		if err != nil {
			return fmt.Errorf("signed in, but the kubeconfig was not written: %w", err)
		}
		fmt.Fprintf(o.Out, "Context %q (cluster %q) is now current: kubectl acts as ichor:%s.\n", name, cluster, f.username)
		return nil
	}
	return cmd
}

// writeExecUser writes the kubeconfig user and context ichor:USER, the
// context for the cluster of --cluster or of the current context, and
// makes it current.
func writeExecUser(o *Options, f *signInFlags) (name, cluster string, err error) {
	loader := o.Config.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return "", "", err
	}
	current := raw.CurrentContext
	if o.Config.Context != nil && *o.Config.Context != "" {
		current = *o.Config.Context
	}
	if o.Config.ClusterName != nil && *o.Config.ClusterName != "" {
		cluster = *o.Config.ClusterName
	} else if ctx := raw.Contexts[current]; ctx != nil {
		cluster = ctx.Cluster
	}
	if _, ok := raw.Clusters[cluster]; !ok || cluster == "" {
		return "", "", errors.New("no cluster to sign in to: give --cluster, or a kubeconfig whose current context names the management cluster")
	}
	name = "ichor:" + f.username
	self := "ichor"
	raw.AuthInfos[name] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:      clientauthv1.SchemeGroupVersion.String(),
		Command:         self,
		Args:            []string{"auth", "token", "--issuer", f.issuer, "--username", f.username},
		InstallHint:     "the ichor CLI signs you in to Ichor: install it on your PATH, then run " + f.loginHint(),
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	ns := ""
	if ctx := raw.Contexts[current]; ctx != nil {
		ns = ctx.Namespace
	}
	raw.Contexts[name] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: name, Namespace: ns}
	raw.CurrentContext = name
	return name, cluster, clientcmd.ModifyConfig(loader.ConfigAccess(), raw, false)
}

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
		Use:   "token --issuer URL --username USER",
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
		path, err := signInPath(f.issuer, f.username)
		if err != nil {
			return err
		}
		unlock, err := lockSignIn(path)
		if err != nil {
			return err
		}
		defer unlock()
		s, err := readSignIn(path)
		if errors.Is(err, errNotSignedIn) {
			return fmt.Errorf("not signed in to %s as %s: run %s", f.issuer, f.username, f.loginHint())
		}
		if err != nil {
			return err
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
	c, err := newIssuerClient(cmd.Context(), s.Issuer, s.CertificateAuthority)
	if err != nil {
		return nil, err
	}
	renewed, err := c.renew(cmd.Context(), s)
	if err != nil {
		return nil, err
	}
	renewed.CertificateAuthority = s.CertificateAuthority
	return renewed, nil
}

func newLogout(o *Options) *cobra.Command {
	var f signInFlags
	cmd := &cobra.Command{
		Use:   "logout --issuer URL --username USER",
		Short: "End the sign-in at the issuer and forget its tokens",
		Long: `logout ends the session at Ichor's token issuer, so that its refresh token renews nothing
any more, and removes it from ~/.ichor/tokens/. A token already handed to kubectl stays valid
until it expires (minutes).`,
		GroupID: "access",
		Args:    cobra.NoArgs,
	}
	f.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path, err := signInPath(f.issuer, f.username)
		if err != nil {
			return err
		}
		unlock, err := lockSignIn(path)
		if err != nil {
			return err
		}
		defer unlock()
		s, err := readSignIn(path)
		if errors.Is(err, errNotSignedIn) {
			fmt.Fprintf(o.Out, "Not signed in to %s as %s.\n", f.issuer, f.username)
			return nil
		}
		if err != nil {
			return err
		}
		c, err := newIssuerClient(cmd.Context(), s.Issuer, s.CertificateAuthority)
		if err != nil {
			return err
		}
		if err := c.end(cmd.Context(), s.RefreshToken); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "Signed out of %s as %s.\n", f.issuer, f.username)
		return nil
	}
	return cmd
}
