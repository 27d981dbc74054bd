package talos

import (
	"crypto"
	"crypto/rand"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/siderolabs/crypto/x509"
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

// clockSkew backdates certificates so that a node whose clock is a little
// behind already accepts them; the lifetime counts from the backdated start.
const clockSkew = 30 * time.Second

// SignClientCertificate certifies a public key someone else holds the private
// half of, as a Talos API client with roles, using the Talos API CA of bundle.
// The certificate names commonName (the requester, for the node's logs), is
// valid for exactly ttl from a little before now, and is returned as PEM.
func SignClientCertificate(bundle *secrets.Bundle, pub crypto.PublicKey, commonName string, roles role.Set, now time.Time, ttl time.Duration) (certPEM []byte, notAfter time.Time, err error) {
	if bundle == nil || bundle.Certs == nil || bundle.Certs.OS == nil || len(bundle.Certs.OS.Key) == 0 {
		return nil, time.Time{}, errors.New("sign a Talos client certificate: the bundle has no Talos API CA key")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.OS)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sign a Talos client certificate: load the Talos API CA: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, time.Time{}, err
	}
	notBefore := now.Add(-clockSkew).Truncate(time.Second) // certificates hold whole seconds
	template := &stdx509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: roles.Strings()},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(ttl),
		KeyUsage:     stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
	}
	der, err := stdx509.CreateCertificate(rand.Reader, template, ca.Crt, pub, ca.Key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sign a Talos client certificate for %v: %w", roles.Strings(), err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), template.NotAfter, nil
}
