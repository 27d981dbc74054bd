// Package auth is the ichor-auth command: Ichor's token issuer for
// IchorUsers, served over HTTPS (pkg/issuer).
package auth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/cmd/serving"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/issuer"
)

// DefaultNamespace is where artifacts/ installs ichor-auth and its Secrets.
const DefaultNamespace = "ichor-system"

// Options are ichor-auth's flags.
type Options struct {
	serving.HTTPS
	IssuerURL            string
	Audience             string
	TokenLifetime        time.Duration
	SessionLifetime      time.Duration
	KeyRotation, KeyLead time.Duration
	Namespace            string
	KeysSecret           string
	SessionsSecret       string
	// TrustedProxyCAFile is the CA of the client certificates that may name
	// the browser a request is for (ichor-ui's), for the rate limits.
	TrustedProxyCAFile string
}

// NewOptions returns ichor-auth's defaults.
func NewOptions() *Options {
	return &Options{
		HTTPS:           serving.HTTPS{BindAddress: ":8443"},
		Audience:        ichor.DefaultTokenAudience,
		TokenLifetime:   5 * time.Minute,
		SessionLifetime: 12 * time.Hour,
		KeyRotation:     7 * 24 * time.Hour,
		KeyLead:         time.Hour,
		Namespace:       DefaultNamespace,
		KeysSecret:      "ichor-auth-keys",
		SessionsSecret:  "ichor-auth-sessions",
	}
}

// AddFlags registers the flags, and controller-runtime's --kubeconfig
// (then $KUBECONFIG, then the in-cluster ServiceAccount).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	if f := flag.CommandLine.Lookup(config.KubeconfigFlagName); f != nil {
		fs.AddGoFlag(f)
	}
	o.HTTPS.AddFlags(fs)
	fs.StringVar(&o.IssuerURL, "issuer-url", o.IssuerURL, "The issuer's https URL, as kube-apiserver's authentication configuration names it and clients reach it.")
	fs.StringVar(&o.Audience, "audience", o.Audience, "The audience (aud) of the tokens, as kube-apiserver's authentication configuration expects it.")
	fs.DurationVar(&o.TokenLifetime, "token-lifetime", o.TokenLifetime, "How long a token is valid (10s to 1h): a disabled user is locked out within it.")
	fs.DurationVar(&o.SessionLifetime, "session-lifetime", o.SessionLifetime, "How long a sign-in is renewed without the password again (at most 30 days).")
	fs.DurationVar(&o.KeyRotation, "key-rotation-period", o.KeyRotation, "How often a new signing key is made.")
	fs.DurationVar(&o.KeyLead, "key-publish-lead", o.KeyLead, "How long a new signing key is published before it signs.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The namespace of the Secrets ichor-auth keeps its state in.")
	fs.StringVar(&o.KeysSecret, "keys-secret", o.KeysSecret, "The Secret that holds the signing keys.")
	fs.StringVar(&o.TrustedProxyCAFile, "trusted-proxy-ca-file", o.TrustedProxyCAFile, "The CA (PEM) of the client certificate ichor-ui presents: "+
		"a request over such a connection names the browser it is for ("+issuer.ClientAddressHeader+"), and the rate limits count that browser's address. Empty: none.")
	fs.StringVar(&o.SessionsSecret, "sessions-secret", o.SessionsSecret, "The Secret that holds the sessions.")
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if err := o.HTTPS.Validate("ichor-auth"); err != nil {
		errs = append(errs, err)
	}
	if o.IssuerURL == "" {
		errs = append(errs, errors.New("--issuer-url is required"))
	}
	if o.TokenLifetime < 10*time.Second || o.TokenLifetime > time.Hour {
		errs = append(errs, fmt.Errorf("--token-lifetime %s: must be between 10s and 1h", o.TokenLifetime))
	}
	if o.SessionLifetime < o.TokenLifetime || o.SessionLifetime > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("--session-lifetime %s: must be between the token lifetime and 30 days", o.SessionLifetime))
	}
	if o.KeyLead <= 0 || o.KeyRotation <= o.KeyLead {
		errs = append(errs, fmt.Errorf("--key-rotation-period %s must be longer than --key-publish-lead %s, which must be positive", o.KeyRotation, o.KeyLead))
	}
	if o.Namespace == "" || o.KeysSecret == "" || o.SessionsSecret == "" || o.KeysSecret == o.SessionsSecret {
		errs = append(errs, errors.New("--namespace, --keys-secret and --sessions-secret are required, and the two Secrets must differ"))
	}
	return errors.Join(errs...)
}

// Run serves the issuer until ctx ends, as the user of cfg. It signs
// nothing before its keys are read (ready), and returns when the server
// stopped.
func (o *Options) Run(ctx context.Context, cfg *rest.Config) error {
	return o.RunOn(ctx, cfg, nil)
}

// RunOn is Run on a listener already open (nil: BindAddress).
func (o *Options) RunOn(ctx context.Context, cfg *rest.Config, ln net.Listener) error {
	// A slow API server must not pile up sign-ins.
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 30 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ichor, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	iss, err := issuer.New(issuer.Config{
		URL: o.IssuerURL, Audience: o.Audience, TokenLifetime: o.TokenLifetime, SessionLifetime: o.SessionLifetime,
		KeyRotation: o.KeyRotation, KeyLead: o.KeyLead,
		Namespace: o.Namespace, KeysSecret: o.KeysSecret, SessionsSecret: o.SessionsSecret,
		Kube: kube, Ichor: ichor,
	})
	if err != nil {
		return err
	}
	if o.TrustedProxyCAFile != "" {
		if o.ClientCAs, err = serving.CertPool("--trusted-proxy-ca-file", o.TrustedProxyCAFile); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/", iss.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !iss.Ready() {
			http.Error(w, "no signing key yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go iss.Run(ctx)
	return o.Serve(ctx, ln, securityHeaders(mux), 30*time.Second, "the token issuer "+o.IssuerURL)
}

// securityHeaders are on every answer: HTTPS only, nothing to frame or sniff.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Strict-Transport-Security", "max-age=31536000")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}
