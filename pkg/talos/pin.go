package talos

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync"

	"github.com/siderolabs/crypto/x509"
)

// Pin says which maintenance certificate a session accepts. The zero value
// observes: see Observe.
type Pin struct {
	fingerprint x509.Fingerprint
}

// Observe trusts the certificate of the session's first handshake, whatever
// it is, and records its fingerprint; later handshakes of the same session
// must present the same certificate. It is for first contact only.
func Observe() Pin { return Pin{} }

// Pinned accepts only a certificate whose SPKI fingerprint is fingerprint, in
// talosctl's --cert-fingerprint form (standard base64 of the SHA-256 of the
// SubjectPublicKeyInfo).
func Pinned(fingerprint string) (Pin, error) {
	fp, err := x509.ParseFingerprint(fingerprint)
	if err != nil {
		return Pin{}, fmt.Errorf("parse pinned fingerprint: %w", err)
	}
	if len(fp) != 32 {
		return Pin{}, fmt.Errorf("parse pinned fingerprint: %d bytes, want a SHA-256 (32)", len(fp))
	}
	return Pin{fingerprint: fp}, nil
}

// Observing reports whether the pin is Observe.
func (p Pin) Observing() bool { return len(p.fingerprint) == 0 }

// String is the pinned fingerprint, or "observe".
func (p Pin) String() string {
	if p.Observing() {
		return "observe"
	}
	return p.fingerprint.String()
}

// FingerprintMismatchError is a handshake refused because the node presented
// a certificate other than the pinned one. Nothing was sent to it.
type FingerprintMismatchError struct {
	// Address is where the node was contacted.
	Address string
	// Pinned is the fingerprint the session accepts.
	Pinned string
	// Presented is the fingerprint of the certificate the node presented.
	Presented string
}

func (e *FingerprintMismatchError) Error() string {
	return fmt.Sprintf("the node at %s presented a certificate with SPKI fingerprint %s, not the pinned %s", e.Address, e.Presented, e.Pinned)
}

// AsFingerprintMismatch returns the mismatch err carries, if any.
func AsFingerprintMismatch(err error) (*FingerprintMismatchError, bool) {
	var m *FingerprintMismatchError
	ok := errors.As(err, &m)
	return m, ok
}

// verifier checks every handshake of one session against its pin, or, for
// a session verified against a CA (newRecorder), only records what it saw. The TLS
// stack calls it from gRPC's goroutines, hence the lock. gRPC reports a
// refused handshake only as text inside an Unavailable status, so the
// verifier keeps the typed mismatch for the session to return.
type verifier struct {
	address string

	recordOnly bool // the TLS stack verifies the chain; the pin is not used

	mu        sync.Mutex
	pinned    x509.Fingerprint // empty while observing, until the first handshake
	presented x509.Fingerprint // the last certificate accepted
	mismatch  *FingerprintMismatchError
}

func newVerifier(address string, pin Pin) *verifier {
	return &verifier{address: address, pinned: pin.fingerprint}
}

// newRecorder records the certificates a CA-verified session accepted.
func newRecorder(address string) *verifier {
	return &verifier{address: address, recordOnly: true}
}

// tlsConfig accepts exactly the certificates the pin allows. Maintenance-mode
// certificates are self-signed, so chain and name verification are replaced
// by the SPKI check in VerifyConnection, which runs on every handshake.
func (v *verifier) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection pins the SPKI fingerprint instead
		VerifyConnection:   v.verify,
	}
}

func (v *verifier) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the node presented no certificate")
	}
	got := x509.SPKIFingerprint(cs.PeerCertificates[0])

	v.mu.Lock()
	defer v.mu.Unlock()
	if v.recordOnly {
		v.presented = got
		return nil
	}
	if len(v.pinned) == 0 {
		// Observing: the first handshake decides what the session trusts.
		v.pinned = got
	}
	if !v.pinned.Equal(got) {
		v.mismatch = &FingerprintMismatchError{Address: v.address, Pinned: v.pinned.String(), Presented: got.String()}
		return v.mismatch
	}
	v.presented = got
	return nil
}

// fingerprint is the fingerprint of the last accepted certificate, or "".
func (v *verifier) fingerprint() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.presented) == 0 {
		return ""
	}
	return v.presented.String()
}

// explain turns a failed call's error into the mismatch that caused it, if
// a handshake was refused; otherwise it wraps err with what was being done.
func (v *verifier) explain(what string, err error) error {
	v.mu.Lock()
	mismatch := v.mismatch
	v.mu.Unlock()
	if mismatch != nil {
		return mismatch
	}
	return fmt.Errorf("%s at %s: %w", what, v.address, err)
}

// mismatchErr is the session's refused handshake, if any (nil otherwise).
func (v *verifier) mismatchErr() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mismatch == nil {
		return nil
	}
	return v.mismatch
}
