package intake

import (
	"context"
	"errors"

	"ichor.dev/ichor/pkg/talos"
)

// Result is the outcome of one contact with a node's maintenance API.
type Result struct {
	// Address is where the node was contacted.
	Address string
	// Facts and Fingerprint are what the node reported and presented, when
	// the contact succeeded.
	Facts       *talos.Facts
	Fingerprint string
	// Err is why the contact failed: a *talos.FingerprintMismatchError when
	// the node presented a certificate other than the pinned one.
	Err error
	// Expected: the certificate accepted was the one the user expected
	// (TalosMachine spec.expectedFingerprint), not the first that answered.
	Expected bool
}

// Contact opens a maintenance-mode session with address that accepts only
// pinned, or when nothing is pinned yet only expected, or when neither is
// set observes the certificate of first contact; it reads the node's facts
// and closes the session.
func Contact(ctx context.Context, d talos.Dialer, address, pinned, expected string) Result {
	r := Result{Address: address}
	pin := talos.Observe()
	if pinned == "" && expected != "" {
		pinned, r.Expected = expected, true
	}
	if pinned != "" {
		var err error
		if pin, err = talos.Pinned(pinned); err != nil {
			r.Err = err
			return r
		}
	}
	node, err := d.Maintenance(ctx, address, pin)
	if err != nil {
		r.Err = err
		return r
	}
	defer func() { _ = node.Close() }()
	facts, err := node.Facts(ctx)
	if err != nil {
		r.Err = err
		return r
	}
	if node.Fingerprint() == "" {
		// Facts came back, so a handshake passed; a session that cannot
		// say what it accepted must not lead to a pin.
		r.Err = errors.New("the session accepted no certificate")
		return r
	}
	r.Facts, r.Fingerprint = facts, node.Fingerprint()
	return r
}

// InMaintenance reports whether a node in maintenance mode answers at
// address, whatever certificate it presents: a node that was reset is back.
func InMaintenance(ctx context.Context, d talos.Dialer, address string) bool {
	node, err := d.Maintenance(ctx, address, talos.Observe())
	if err != nil {
		return false
	}
	defer func() { _ = node.Close() }()
	_, err = node.Facts(ctx)
	return err == nil
}

// Mismatch is the refused certificate of a failed contact, if that is why it failed.
func (r Result) Mismatch() (*talos.FingerprintMismatchError, bool) {
	if r.Err == nil {
		return nil, false
	}
	return talos.AsFingerprintMismatch(r.Err)
}
