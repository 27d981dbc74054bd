// Package ui is the ichor-ui command: Ichor's web console (pkg/ui), served
// over HTTPS.
package ui

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/cmd/serving"
	"ichor.dev/ichor/pkg/ui"
)

// Options are ichor-ui's flags.
type Options struct {
	serving.HTTPS
	IssuerURL    string
	IssuerCAFile string
	// IssuerClientCertFile and IssuerClientKeyFile are the client
	// certificate ichor-ui presents to ichor-auth, so that ichor-auth takes
	// the browser address it names for its rate limits (its
	// --trusted-proxy-ca-file issued it).
	IssuerClientCertFile, IssuerClientKeyFile string
	SessionLifetime                           time.Duration
	// KubeCAFile is the CA of kube-apiserver's serving certificate, in a
	// pod (without --kubeconfig).
	KubeCAFile string

	// The OpenID provider people may also sign in at (off when
	// OIDCIssuerURL is empty).
	OIDCIssuerURL        string
	OIDCClientID         string
	OIDCClientSecretFile string
	OIDCCAFile           string
	OIDCName             string
	OIDCRedirectURL      string
}

// NewOptions returns ichor-ui's defaults.
func NewOptions() *Options {
	return &Options{HTTPS: serving.HTTPS{BindAddress: ":8443"}, SessionLifetime: 12 * time.Hour, KubeCAFile: "/var/run/ichor/kube-ca/ca.crt"}
}

// AddFlags registers the flags, and controller-runtime's --kubeconfig
// (then $KUBECONFIG, then the pod's kube-apiserver Service and
// --kube-ca-file), of which ichor-ui uses the server and its CA only.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	if f := flag.CommandLine.Lookup(config.KubeconfigFlagName); f != nil {
		fs.AddGoFlag(f)
	}
	o.HTTPS.AddFlags(fs)
	fs.StringVar(&o.IssuerURL, "issuer-url", o.IssuerURL, "ichor-auth's issuer URL, where Ichor users sign in.")
	fs.StringVar(&o.IssuerCAFile, "issuer-ca-file", o.IssuerCAFile, "The CA that signed ichor-auth's serving certificate (PEM); the system's roots when empty.")
	fs.StringVar(&o.IssuerClientCertFile, "issuer-client-cert-file", o.IssuerClientCertFile, "A client certificate (PEM) from ichor-auth's --trusted-proxy-ca-file: "+
		"with it, ichor-auth limits sign-ins per browser rather than per console. Empty: none.")
	fs.StringVar(&o.IssuerClientKeyFile, "issuer-client-key-file", o.IssuerClientKeyFile, "The key of --issuer-client-cert-file (PEM).")
	fs.StringVar(&o.OIDCIssuerURL, "oidc-issuer-url", o.OIDCIssuerURL, "Your OpenID provider's issuer URL, the one kube-apiserver's authentication configuration trusts; people may sign in there too. Empty: Ichor users only.")
	fs.StringVar(&o.OIDCClientID, "oidc-client-id", o.OIDCClientID, "The console's client at the provider, redirected to https://<this console>/oidc/callback; kube-apiserver must accept it as an audience.")
	fs.StringVar(&o.OIDCClientSecretFile, "oidc-client-secret-file", o.OIDCClientSecretFile, "A file holding the client's secret; empty for a public client (the code is protected with PKCE either way).")
	fs.StringVar(&o.OIDCCAFile, "oidc-ca-file", o.OIDCCAFile, "The CA that signed the provider's serving certificate (PEM); the system's roots when empty.")
	fs.StringVar(&o.OIDCRedirectURL, "oidc-redirect-url", o.OIDCRedirectURL, "Where the provider sends people back, https://<the console's name>/oidc/callback, as registered there; empty: the host each request names.")
	fs.StringVar(&o.OIDCName, "oidc-name", o.OIDCName, `What the sign-in page calls the provider ("Sign in with <name>").`)
	fs.StringVar(&o.KubeCAFile, "kube-ca-file", o.KubeCAFile, "In a pod without --kubeconfig: the CA of kube-apiserver's serving certificate (the kube-root-ca.crt ConfigMap).")
	fs.DurationVar(&o.SessionLifetime, "session-lifetime", o.SessionLifetime, "How long a console session lasts at most (1m to 30 days); it is renewed with ichor-auth as often as a token expires.")
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if err := o.HTTPS.Validate("ichor-ui"); err != nil {
		errs = append(errs, err)
	}
	if o.IssuerURL == "" {
		errs = append(errs, errors.New("--issuer-url is required"))
	}
	if (o.IssuerClientCertFile == "") != (o.IssuerClientKeyFile == "") {
		errs = append(errs, errors.New("--issuer-client-cert-file and --issuer-client-key-file go together"))
	}
	if o.OIDCIssuerURL != "" {
		if u, err := url.Parse(o.OIDCIssuerURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--oidc-issuer-url %q: an https URL", o.OIDCIssuerURL))
		}
		if o.OIDCClientID == "" {
			errs = append(errs, errors.New("--oidc-client-id is required with --oidc-issuer-url"))
		}
		if o.OIDCRedirectURL != "" {
			if u, err := url.Parse(o.OIDCRedirectURL); err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "/oidc/callback" {
				errs = append(errs, fmt.Errorf("--oidc-redirect-url %q: https://<the console's name>/oidc/callback", o.OIDCRedirectURL))
			}
		}
	} else if o.OIDCClientID != "" || o.OIDCClientSecretFile != "" || o.OIDCCAFile != "" || o.OIDCRedirectURL != "" {
		errs = append(errs, errors.New("--oidc-client-id, --oidc-client-secret-file, --oidc-ca-file and --oidc-redirect-url need --oidc-issuer-url"))
	}
	if o.SessionLifetime < time.Minute || o.SessionLifetime > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("--session-lifetime %s: must be between 1m and 30 days", o.SessionLifetime))
	}
	return errors.Join(errs...)
}

// NewCommand returns the ichor-ui command.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "ichor-ui",
		Short: "Serve Ichor's web console, acting for each signed-in person with their own token",
		Long: `ichor-ui is Ichor's web console. People sign in (Ichor users with their
password at ichor-auth, or people of your OpenID provider there); the browser
holds an ichor-ui session and nothing else, and ichor-ui sends kube-apiserver
each request for the person with the person's own short-lived ID token,
renewed with their refresh token (an ichor: or oidc: user; never a system:
name). ichor-ui holds no credential of its own: it needs no ServiceAccount
token and no RBAC.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctrllog.SetLogger(klog.NewKlogr())
			cfg, err := o.kubeAPIServer()
			if err != nil {
				return err
			}
			return o.RunOn(cmd.Context(), cfg, nil)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// kubeAPIServer is where kube-apiserver is: from --kubeconfig or
// $KUBECONFIG, or in a pod from the Service's environment and
// --kube-ca-file. RunOn drops any credential.
func (o *Options) kubeAPIServer() (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if f := flag.CommandLine.Lookup(config.KubeconfigFlagName); (f != nil && f.Value.String() != "") || os.Getenv("KUBECONFIG") != "" || host == "" || port == "" {
		return config.GetConfig()
	}
	if _, err := os.Stat(o.KubeCAFile); err != nil {
		return nil, fmt.Errorf("--kube-ca-file: %w", err)
	}
	return &rest.Config{Host: "https://" + net.JoinHostPort(host, port), TLSClientConfig: rest.TLSClientConfig{CAFile: o.KubeCAFile}}, nil
}

// RunOn serves the console on ln (nil: BindAddress) until ctx ends. cfg
// says where kube-apiserver is; its credentials are never used.
func (o *Options) RunOn(ctx context.Context, cfg *rest.Config, ln net.Listener) error {
	issuerTLS := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.IssuerCAFile != "" {
		pool, err := serving.CertPool("--issuer-ca-file", o.IssuerCAFile)
		if err != nil {
			return err
		}
		issuerTLS.RootCAs = pool
	}
	if o.IssuerClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.IssuerClientCertFile, o.IssuerClientKeyFile)
		if err != nil {
			return fmt.Errorf("--issuer-client-cert-file: %w", err)
		}
		issuerTLS.Certificates = []tls.Certificate{cert}
	}
	oidc, err := o.oidc()
	if err != nil {
		return err
	}
	cfg = rest.AnonymousClientConfig(cfg)
	cfg.Timeout = 30 * time.Second
	srv, err := ui.New(ui.Options{
		IssuerURL:       o.IssuerURL,
		IssuerClient:    &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: issuerTLS}},
		OIDC:            oidc,
		Kube:            cfg,
		SessionLifetime: o.SessionLifetime,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx)
	return o.Serve(ctx, ln, srv, 60*time.Second, "the console")
}

// oidc is the console's OpenID provider, nil when none is configured.
func (o *Options) oidc() (*ui.OIDCOptions, error) {
	if o.OIDCIssuerURL == "" {
		return nil, nil
	}
	opts := &ui.OIDCOptions{IssuerURL: o.OIDCIssuerURL, ClientID: o.OIDCClientID, Name: o.OIDCName, RedirectURL: o.OIDCRedirectURL}
	if o.OIDCClientSecretFile != "" {
		secret, err := os.ReadFile(o.OIDCClientSecretFile)
		if err != nil {
			return nil, err
		}
		opts.ClientSecret = strings.TrimSpace(string(secret))
		if opts.ClientSecret == "" {
			return nil, fmt.Errorf("--oidc-client-secret-file %s is empty", o.OIDCClientSecretFile)
		}
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.OIDCCAFile != "" {
		pool, err := serving.CertPool("--oidc-ca-file", o.OIDCCAFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = pool
	}
	opts.Client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return opts, nil
}
