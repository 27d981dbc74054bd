package talossim

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// ErrNotPoweredOff is returned by PowerOn when the node is not in PhaseShutdown.
var ErrNotPoweredOff = errors.New("talossim: node is not powered off")

// Shutdown acknowledges with an actor ID and powers the node off: like Talos's shutdown sequence (run
// with takeover) it takes over any running sequence, a shutdown too, which then starts again. Without
// Force, a node whose kubelet joined is first cordoned and drained (drain.go) in PhaseShuttingDown
// (stage shutting down), its API and kubelet up meanwhile; a forced shutdown, or a node without a
// kubelet, powers off at once. The API is down (calls fail with Unavailable) until PowerOn.
func (s *machineServer) Shutdown(_ context.Context, in *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
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

	reply := &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: actorID}}}

	n.recordSequenceLocked("shutdown", actorID)

	spec, kubeletRuns := n.kubeletSpecLocked()
	if in.GetForce() || !kubeletRuns || !n.joinedLocked() {
		if err := n.powerOffLocked(); err != nil {
			return nil, err
		}

		return reply, nil
	}

	gen := n.beginSequenceLocked()
	n.cancelRollbackLocked()

	if err := n.setPhaseLocked(PhaseShuttingDown); err != nil {
		return nil, err
	}

	n.wg.Go(func() { n.drainThenPowerOff(gen, spec) })

	return reply, nil
}

// drainThenPowerOff is a graceful shutdown's sequence: cordon and drain the node, then power off, unless
// another sequence took over meanwhile.
func (n *Node) drainThenPowerOff(gen uint64, spec kubeletSpec) {
	n.drain(spec, "shutdown")

	n.mu.Lock()
	defer n.mu.Unlock()

	if !n.currentLocked(gen) {
		return
	}

	if err := n.powerOffLocked(); err != nil {
		log.Printf("talossim: powering off after draining: %v", err)
	}
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
