package intake

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// A node-reset that wipes a node's system disk sends it back to maintenance
// mode with a new certificate. The operation takes the machine back in two
// writes: Repin pins the certificate the node presents now in place of the
// one the wipe took away (as intake, which owns the pin), then
// configstatus.ForgetConfig forgets the machine's config, so that the config
// reconciler installs it again over the maintenance API, to that
// certificate only. In that order, intake, which looks at machines without
// a config, finds the new pin, never the old one.
//
// The certificate is trusted as intake trusts a first contact, and more
// narrowly: only at the machine's address, only for a node reporting the
// machine's system UUID, and only after the node, authenticated by its
// cluster's CA, accepted the reset. A machine without a recorded UUID, or
// one whose certificate an admin pinned from its console
// (spec.expectedFingerprint), is not taken back this way: the operation
// refuses to wipe it.

// Repin pins the certificate the node at m's address presented in contact,
// after operation reset it, if the node is m.
func Repin(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, contact Result, operation string, now metav1.Time) error {
	switch {
	case contact.Err != nil || contact.Facts == nil:
		return fmt.Errorf("no maintenance-mode contact with the node at %s", m.Spec.Address)
	case m.Status.Hardware == nil || m.Status.Hardware.UUID == "":
		return errors.New("the machine has no system UUID on record to recognise its node by")
	case contact.Facts.UUID != m.Status.Hardware.UUID:
		return &NotThisMachineError{Address: m.Spec.Address, Want: m.Status.Hardware.UUID, Got: contact.Facts.UUID}
	}
	pinned := m.DeepCopy()
	RepinAfterReset(&pinned.Status, m.Generation, contact, operation, now)
	if err := WriteStatus(ctx, c, pinned); err != nil {
		return err
	}
	*m = *pinned
	return nil
}

// Repinned reports whether m's certificate was pinned at since or later:
// after a reset that began then. The pin is intake's field alone, which no
// other writer's stale copy can set back.
func Repinned(m *v1alpha1.TalosMachine, since metav1.Time) bool {
	return m.Status.Maintenance != nil && !m.Status.Maintenance.SeenAt.Before(&since)
}
