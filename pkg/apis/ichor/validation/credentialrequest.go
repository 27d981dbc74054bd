package validation

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// minRSABits is the smallest RSA key Ichor certifies.
const minRSABits = 2048

// ValidateTalosCredentialRequest checks a TalosCredentialRequest on create,
// after the server has filled in the requester.
func ValidateTalosCredentialRequest(r *ichor.TalosCredentialRequest) field.ErrorList {
	errs := validateNamespacedMeta(&r.ObjectMeta)
	spec := field.NewPath("spec")
	s := &r.Spec
	errs = append(errs, validateRequiredName(s.ClusterName, spec.Child("clusterName"))...)
	errs = append(errs, validateNameList(s.Machines, spec.Child("machines"))...)
	errs = append(errs, validateEnum(s.Purpose, spec.Child("purpose"), slices.Sorted(maps.Keys(ichor.CredentialPurposes))...)...)
	if s.PublicKey == "" {
		errs = append(errs, field.Required(spec.Child("publicKey"), "a PEM-encoded PKIX public key"))
	} else if err := checkPublicKey(s.PublicKey); err != nil {
		errs = append(errs, field.Invalid(spec.Child("publicKey"), "<public key>", err.Error()))
	}
	if s.Username == "" {
		errs = append(errs, field.Required(spec.Child("username"), "requests need an authenticated requester"))
	}
	return errs
}

// ValidateTalosCredentialRequestUpdate checks an update: the request is immutable.
func ValidateTalosCredentialRequestUpdate(r, old *ichor.TalosCredentialRequest) field.ErrorList {
	errs := validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateImmutableSpec(r.Spec, old.Spec, field.NewPath("spec"), "create a new request instead")...)
}

// ValidateTalosCredentialRequestStatusUpdate checks a status written through /status.
func ValidateTalosCredentialRequestStatusUpdate(r, old *ichor.TalosCredentialRequest) field.ErrorList {
	errs := validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	errs = append(errs, validateConditions(r.Status.Conditions, status.Child("conditions"))...)
	if r.Status.Certificate != "" {
		if err := checkCertificate(r.Status.Certificate); err != nil {
			errs = append(errs, field.Invalid(status.Child("certificate"), "<certificate>", err.Error()))
		}
	}
	return errs
}

// checkPublicKey accepts one PEM "PUBLIC KEY" block holding an Ed25519, ECDSA or large enough RSA key.
func checkPublicKey(text string) error {
	if text == "" {
		return fmt.Errorf("required: a PEM-encoded PKIX public key")
	}
	block, rest := pem.Decode([]byte(text))
	if block == nil || block.Type != "PUBLIC KEY" {
		return fmt.Errorf("must be one PEM block of type PUBLIC KEY")
	}
	if len(pemTrim(rest)) > 0 {
		return fmt.Errorf("must hold exactly one PEM block")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("must be a PKIX public key: %v", err)
	}
	switch k := key.(type) {
	case ed25519.PublicKey, *ecdsa.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA keys must have at least %d bits", minRSABits)
		}
		return nil
	default:
		return fmt.Errorf("key type %T is not supported; use Ed25519, ECDSA or RSA", key)
	}
}

func checkCertificate(text string) error {
	block, _ := pem.Decode([]byte(text))
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("must be a PEM block of type CERTIFICATE")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return fmt.Errorf("must be an X.509 certificate: %v", err)
	}
	return nil
}

func pemTrim(b []byte) []byte {
	for len(b) > 0 && (b[0] == '\n' || b[0] == '\r' || b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
