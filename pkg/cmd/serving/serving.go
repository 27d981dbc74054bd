// Package serving is how Ichor's own HTTPS servers (ichor-auth, ichor-ui)
// serve: their flags, a serving certificate reloaded when it changes, the
// server's timeouts, and a graceful stop.
package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// HTTPS are the serving flags.
type HTTPS struct {
	BindAddress             string
	TLSCertFile, TLSKeyFile string
	// ClientCAs, when set, are the CAs whose client certificates a client
	// may present (it need not): a handler reads r.TLS.VerifiedChains.
	ClientCAs *x509.CertPool
}

// AddFlags registers --bind-address, --tls-cert-file and --tls-private-key-file.
func (o *HTTPS) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Where to serve HTTPS.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "The serving certificate (PEM); reloaded when it changes.")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", o.TLSKeyFile, "The serving certificate's private key (PEM).")
}

// Validate says what is missing for component to serve HTTPS, or nil.
func (o *HTTPS) Validate(component string) error {
	if o.TLSCertFile == "" || o.TLSKeyFile == "" {
		return fmt.Errorf("--tls-cert-file and --tls-private-key-file are required: %s serves HTTPS only", component)
	}
	return nil
}

// Serve serves handler over HTTPS on ln (nil: BindAddress) until ctx ends,
// then stops gracefully; what names the server in the log.
func (o *HTTPS) Serve(ctx context.Context, ln net.Listener, handler http.Handler, writeTimeout time.Duration, what string) error {
	certs, err := certwatcher.New(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("load the serving certificate: %w", err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", o.BindAddress); err != nil {
			return err
		}
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
	}
	if o.ClientCAs != nil {
		srv.TLSConfig.ClientCAs, srv.TLSConfig.ClientAuth = o.ClientCAs, tls.VerifyClientCertIfGiven
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = certs.Start(ctx) }()
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	klog.InfoS("serving "+what, "address", ln.Addr().String())
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// CertPool reads the PEM certificates of file, named by flag in errors.
func CertPool(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, file)
	}
	return pool, nil
}
