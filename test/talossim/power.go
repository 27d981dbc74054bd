package talossim

import (
	"context"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// ErrNotPoweredOff is returned by PowerOn when the node is not in PhaseShutdown.
var ErrNotPoweredOff = errors.New("talossim: node is not powered off")

// Shutdown acknowledges with an actor ID and powers the node off: like Talos's shutdown sequence it takes
// over any running sequence. The API is down (calls fail with Unavailable) until PowerOn. The Force flag
// (skip draining Kubernetes) has nothing to act on in the simulator.
func (s *machineServer) Shutdown(context.Context, *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	actorID, err := randomUUID()
	if err != nil {
		return nil, fmt.Errorf("generating actor ID: %w", err)
	}

	n := s.node

	n.mu.Lock()
	defer n.mu.Unlock()

	if n.stopped {
		return nil, errNodeStopped
	}

	n.recordSequenceLocked("shutdown", actorID)

	if err := n.powerOffLocked(); err != nil {
		return nil, err
	}

	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: actorID}}}, nil
}

// PowerOn boots a powered-off node (PhaseShutdown) after Options.RebootDelay, like pressing the power
// button: it comes back running from its installed config, or in maintenance mode without one. It returns
// ErrNotPoweredOff in any other phase and ErrStopped after Stop.
func (n *Node) PowerOn() error {
	n.mu.Lock()
	defer n.mu.Unlock()

	switch {
	case n.stopped:
		return ErrStopped
	case n.phase != PhaseShutdown:
		return fmt.Errorf("%w (phase %s)", ErrNotPoweredOff, n.phase)
	}

	gen := n.beginSequenceLocked()

	n.wg.Go(func() { n.finishReboot(gen) })

	return nil
}
