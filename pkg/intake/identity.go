package intake

import (
	"context"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// NotThisMachineError says the node answering at a machine's address is
// another machine: every node of a cluster presents a certificate of the
// same Talos CA, so mutual TLS alone does not tell them apart, and an
// address that moved (a DHCP lease, a swapped cable) would otherwise have
// the controller apply to, or reset, the wrong node.
type NotThisMachineError struct {
	Address, Want, Got string
}

func (e *NotThisMachineError) Error() string {
	return fmt.Sprintf("the node answering at %s has system UUID %s, not %s, the UUID this machine reported at intake; nothing is sent to it",
		e.Address, e.Got, e.Want)
}

// CheckIdentity reads the system UUID of the node behind session and
// compares it with the one intake recorded for m. A machine whose firmware
// reported no UUID cannot be told apart this way and passes.
func CheckIdentity(ctx context.Context, node talos.Node, m *v1alpha1.TalosMachine) error {
	if m.Status.Hardware == nil || m.Status.Hardware.UUID == "" {
		return nil
	}
	facts, err := node.Facts(ctx)
	if err != nil {
		return fmt.Errorf("read the node's system UUID: %w", err)
	}
	if facts.UUID != m.Status.Hardware.UUID {
		return &NotThisMachineError{Address: m.Spec.Address, Want: m.Status.Hardware.UUID, Got: facts.UUID}
	}
	return nil
}
