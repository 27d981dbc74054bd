package talos

import (
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// MintCredentials signs a client certificate for roles with the Talos API CA
// of bundle, valid from now (less a minute of clock skew) for ttl, and
// returns it with the CA to verify nodes against. The key never leaves the
// returned value.
func MintCredentials(bundle *secrets.Bundle, roles role.Set, now time.Time, ttl time.Duration) (Credentials, error) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.OS == nil || len(bundle.Certs.OS.Key) == 0 {
		return Credentials{}, errors.New("mint Talos credentials: the bundle has no Talos API CA key")
	}
	cert, err := secrets.NewAdminCertificateAndKey(now, bundle.Certs.OS, roles, ttl)
	if err != nil {
		return Credentials{}, fmt.Errorf("mint Talos credentials for %v: %w", roles.Strings(), err)
	}
	return Credentials{CA: bundle.Certs.OS.Crt, Certificate: cert.Crt, Key: cert.Key}, nil
}
