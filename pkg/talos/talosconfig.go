package talos

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// CredentialsFromTalosconfig reads the credentials of a talosconfig's current
// context: the CA its nodes are verified against, and the client certificate
// and key it presents. Errors name what is missing, never a value.
func CredentialsFromTalosconfig(data []byte) (Credentials, error) {
	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		return Credentials{}, errors.New("not a talosconfig: it does not parse as one")
	}
	if cfg.Context == "" {
		return Credentials{}, errors.New("the talosconfig names no current context")
	}
	ctx, ok := cfg.Contexts[cfg.Context]
	if !ok || ctx == nil {
		return Credentials{}, fmt.Errorf("the talosconfig's current context %q is not among its contexts", cfg.Context)
	}
	var creds Credentials
	for _, f := range []struct {
		name, value string
		into        *[]byte
	}{{"ca", ctx.CA, &creds.CA}, {"crt", ctx.Crt, &creds.Certificate}, {"key", ctx.Key, &creds.Key}} {
		if f.value == "" {
			return Credentials{}, fmt.Errorf("context %q of the talosconfig has no %s", cfg.Context, f.name)
		}
		b, err := base64.StdEncoding.DecodeString(f.value)
		if err != nil {
			return Credentials{}, fmt.Errorf("context %q of the talosconfig: %s is not base64", cfg.Context, f.name)
		}
		*f.into = b
	}
	if _, err := tls.X509KeyPair(creds.Certificate, creds.Key); err != nil {
		return Credentials{}, fmt.Errorf("context %q of the talosconfig: crt and key are not a certificate and its key", cfg.Context)
	}
	return creds, nil
}
