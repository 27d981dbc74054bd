package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// signInFlags name a sign-in: an IchorUser at Ichor's issuer, or, with
// --oidc, a person at an OpenID provider through its client.
type signInFlags struct {
	issuer, username string
	oidc             bool
	clientID         string
}

func (f *signInFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.issuer, "issuer", "", "the issuer: Ichor's (ichor-auth), or with --oidc your OpenID provider, as kube-apiserver's authentication configuration names it")
	cmd.Flags().StringVar(&f.username, "username", "", "the IchorUser; with --oidc, the email you sign in with at the provider")
	cmd.Flags().BoolVar(&f.oidc, "oidc", false, "sign in at an OpenID provider instead of as an IchorUser")
	cmd.Flags().StringVar(&f.clientID, "client-id", "ichor", "with --oidc: the provider's client for the ichor CLI (a public client; also kube-apiserver's audience)")
	_ = cmd.MarkFlagRequired("issuer")
}

// check says what is missing or out of place; login finds out who an
// OpenID sign-in is for, the other commands are told.
func (f *signInFlags) check(cmd *cobra.Command, login bool) error {
	switch {
	case !f.oidc && f.username == "":
		return errors.New("--username is required (or --oidc, to sign in at an OpenID provider)")
	case f.oidc && !login && f.username == "":
		return errors.New("--username is required: the email of the OpenID sign-in")
	case !f.oidc && cmd.Flags().Changed("client-id"):
		return errors.New("--client-id is for --oidc")
	case f.oidc && f.clientID == "":
		return errors.New("--client-id is required with --oidc")
	}
	return nil
}

// who names the sign-in in ~/.ichor/tokens/.
func (f *signInFlags) who() string {
	if f.oidc {
		return "client:" + f.clientID + "/" + f.username
	}
	return f.username
}

// args are the flags that name the sign-in again, for auth token and hints.
func (f *signInFlags) args() []string {
	if f.oidc {
		return []string{"--oidc", "--issuer", f.issuer, "--client-id", f.clientID, "--username", f.username}
	}
	return []string{"--issuer", f.issuer, "--username", f.username}
}

// open checks the flags of a command that uses a kept sign-in, takes the
// sign-in's lock and reads it: s is nil when there is none. The caller
// releases the lock with unlock.
func (f *signInFlags) open(cmd *cobra.Command) (path string, s *signIn, unlock func(), err error) {
	if err := f.check(cmd, false); err != nil {
		return "", nil, nil, err
	}
	if path, err = signInPath(f.issuer, f.who()); err != nil {
		return "", nil, nil, err
	}
	if unlock, err = lockSignIn(path); err != nil {
		return "", nil, nil, err
	}
	s, err = readSignIn(path)
	switch {
	case errors.Is(err, errNotSignedIn):
		return path, nil, unlock, nil
	case err != nil:
		unlock()
		return "", nil, nil, err
	}
	return path, s, unlock, nil
}

// loginHint is the command that signs in again.
func (f *signInFlags) loginHint() string {
	return "ichor login " + strings.Join(f.args(), " ")
}

// loginOptions are the flags of ichor login.
type loginOptions struct {
	signInFlags
	caFile, passwordFile string
	noKubeconfig         bool
	device, noBrowser    bool
}

func newLogin(o *Options) *cobra.Command {
	var f loginOptions
	cmd := &cobra.Command{
		Use:   "login --issuer URL (--username USER | --oidc)",
		Short: "Sign in, as an IchorUser or at your OpenID provider, and set up kubectl to act as you",
		Long: `login signs you in and keeps the session in ~/.ichor/tokens/ (readable by you only). It then
writes a kubeconfig user, and a context of the same name for the current context's cluster (or
--cluster), that runs "ichor auth token": the kubeconfig holds no secret.

As an IchorUser (--username), it sends the password (prompted without echo; for automation, from
--password-file or ` + PasswordEnv + `) to Ichor's token issuer; kube-apiserver knows you as
ichor:USER, in the group ichor:<your role>.

At an OpenID provider (--oidc), you sign in there: in a browser (the authorization-code flow with
PKCE, the answer coming back to a listener on 127.0.0.1), or with --device on a shell without a
browser (you open the provider's page anywhere and enter the code shown). kube-apiserver knows you
as oidc:<your email>, in the ichor: groups your provider's ichor-viewer, ichor-operator or
ichor-admin group gives.`,
		Example: `  ichor login --issuer https://ichor-auth.example.net --username dana
  ichor login --oidc --issuer https://idp.example.net
  ichor login --oidc --issuer https://idp.example.net --device
  kubectl auth whoami`,
		GroupID: "access",
		Args:    cobra.NoArgs,
	}
	f.add(cmd)
	cmd.Flags().StringVar(&f.caFile, "issuer-certificate-authority", "", "PEM file of the CA of the issuer's serving certificate, when the system does not trust it")
	cmd.Flags().StringVar(&f.passwordFile, "password-file", "", "read the IchorUser's password from this file (its first line)")
	cmd.Flags().BoolVar(&f.noKubeconfig, "no-kubeconfig", false, "only sign in; leave the kubeconfig as it is")
	cmd.Flags().BoolVar(&f.device, "device", false, "with --oidc: the device flow, for a shell without a browser")
	cmd.Flags().BoolVar(&f.noBrowser, "no-browser", false, "with --oidc: print the sign-in URL; open no browser")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.checkLogin(cmd); err != nil {
			return err
		}
		return f.run(cmd.Context(), o)
	}
	return cmd
}

// checkLogin says what is missing or out of place among login's flags.
func (f *loginOptions) checkLogin(cmd *cobra.Command) error {
	if err := f.check(cmd, true); err != nil {
		return err
	}
	for _, flag := range []string{"device", "no-browser"} {
		if cmd.Flags().Changed(flag) && !f.oidc {
			return fmt.Errorf("--%s is for --oidc", flag)
		}
	}
	if f.oidc && (f.passwordFile != "") {
		return errors.New("--password-file is for IchorUsers: with --oidc you sign in at the provider")
	}
	return nil
}

// run signs in, keeps the sign-in and, unless --no-kubeconfig, writes the
// kubeconfig user and context that use it.
func (f *loginOptions) run(ctx context.Context, o *Options) error {
	var ca string
	if f.caFile != "" {
		b, err := os.ReadFile(f.caFile)
		if err != nil {
			return err
		}
		ca = string(b)
	}
	var s *signIn
	var name string
	var end func(refreshToken string) error
	var err error
	if f.oidc {
		s, name, err = f.signInOIDC(ctx, o, ca)
	} else {
		s, name, end, err = f.signInIchorUser(ctx, o, ca)
	}
	if err != nil {
		return err
	}
	s.CertificateAuthority = ca
	if err := f.keep(o, s, end); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Signed in to %s as %s; the token is renewed until the session ends.\n", f.issuer, name)
	if f.noKubeconfig {
		return nil
	}
	cluster, err := writeExecUser(o, &f.signInFlags, name)
	if err != nil {
		return fmt.Errorf("signed in, but the kubeconfig was not written: %w", err)
	}
	fmt.Fprintf(o.Out, "Context %q (cluster %q) is now current: kubectl acts as %s.\n", name, cluster, name)
	return nil
}

// signInOIDC signs in at the OpenID provider, in a browser or with the
// device flow, and returns the sign-in and the name kube-apiserver knows
// it by. The sign-in is for the email the provider vouches for, which must
// be --username's when it is given.
func (f *loginOptions) signInOIDC(ctx context.Context, o *Options, ca string) (*signIn, string, error) {
	c, err := newOIDCClient(ctx, f.issuer, f.clientID, ca)
	if err != nil {
		return nil, "", err
	}
	var s *signIn
	var email string
	if f.device {
		s, email, err = c.deviceSignIn(ctx, o)
	} else {
		s, email, err = c.browserSignIn(ctx, o, !f.noBrowser)
	}
	if err != nil {
		return nil, "", signInRefused(err)
	}
	if c.warn != "" {
		fmt.Fprintf(o.ErrOut, "warning: %s\n", c.warn)
	}
	if f.username != "" && f.username != email {
		return nil, "", fmt.Errorf("you signed in at the provider as %s, not %s: nothing was kept", email, f.username)
	}
	f.username = email
	return s, ichor.OIDCPrefix + email, nil
}

// signInIchorUser signs in as the IchorUser with its password at Ichor's
// issuer, and returns the sign-in, the name kube-apiserver knows it by, and
// end, which ends a session of the issuer's.
func (f *loginOptions) signInIchorUser(ctx context.Context, o *Options, ca string) (*signIn, string, func(refreshToken string) error, error) {
	password, err := readSecret(o, f.passwordFile, secretInput{what: "password", prompt: "Password for " + f.username, env: PasswordEnv})
	if err != nil {
		return nil, "", nil, err
	}
	c, err := newIssuerClient(ctx, f.issuer, ca)
	if err != nil {
		return nil, "", nil, err
	}
	s, err := c.signIn(ctx, f.username, password)
	if err != nil {
		return nil, "", nil, signInRefused(err)
	}
	end := func(token string) error { return c.end(ctx, token) }
	return s, ichor.IchorUserPrefix + f.username, end, nil
}

// keep writes the sign-in in ~/.ichor/tokens/ over the one it replaces,
// whose session end, when set, then ends at the issuer.
func (f *loginOptions) keep(o *Options, s *signIn, end func(refreshToken string) error) error {
	path, err := signInPath(f.issuer, f.who())
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
	// The sign-in this one replaces ends at Ichor's issuer too.
	if end != nil && previous != nil && previous.RefreshToken != "" {
		if err := end(previous.RefreshToken); err != nil {
			fmt.Fprintf(o.ErrOut, "warning: the previous session was not ended: %v\n", err)
		}
	}
	return nil
}

// signInRefused says that the issuer refused the sign-in, and why.
func signInRefused(err error) error {
	var ended *sessionEndedError
	if errors.As(err, &ended) {
		return fmt.Errorf("sign-in refused: %s", ended.why)
	}
	return err
}

// writeExecUser writes the kubeconfig user and context ichor:USER, the
// context for the cluster of --cluster or of the current context, and
// makes it current.
func writeExecUser(o *Options, f *signInFlags, name string) (cluster string, err error) {
	loader := o.Config.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return "", err
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
		return "", errors.New("no cluster to sign in to: give --cluster, or a kubeconfig whose current context names the management cluster")
	}
	raw.AuthInfos[name] = execUser(f, "the ichor CLI signs you in to Ichor")
	ns := ""
	if ctx := raw.Contexts[current]; ctx != nil {
		ns = ctx.Namespace
	}
	raw.Contexts[name] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: name, Namespace: ns}
	raw.CurrentContext = name
	return cluster, clientcmd.ModifyConfig(loader.ConfigAccess(), raw, false)
}

// execUser is the kubeconfig user of a sign-in: it runs ichor auth token,
// kubectl's exec credential plugin, and holds no secret. what says what the
// CLI does for someone who lacks it.
func execUser(f *signInFlags, what string) *clientcmdapi.AuthInfo {
	return &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:      clientauthv1.SchemeGroupVersion.String(),
		Command:         "ichor",
		Args:            append([]string{"auth", "token"}, f.args()...),
		InstallHint:     what + ": install it on your PATH, then run " + f.loginHint(),
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
}
