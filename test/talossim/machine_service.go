package talossim

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// machineServer implements the subset of machined's MachineService the simulator supports; every other
// method answers Unimplemented through the embedded type.
type machineServer struct {
	machine.UnimplementedMachineServiceServer

	node *Node
}

// Version reports the simulated Talos version, a metal platform, and RBAC once a config is active.
func (s *machineServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	n := s.node

	n.mu.Lock()
	configured := n.configuredLocked()
	n.mu.Unlock()

	info := version.NewVersion()
	info.Tag = n.opts.Version

	var features *machine.FeaturesInfo
	if configured {
		features = &machine.FeaturesInfo{Rbac: true}
	}

	return &machine.VersionResponse{
		Messages: []*machine.Version{{
			Version:  info,
			Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
			Features: features,
		}},
	}, nil
}

// Hostname reports the node's current hostname (the configured one once a config sets it).
func (s *machineServer) Hostname(context.Context, *emptypb.Empty) (*machine.HostnameResponse, error) {
	n := s.node

	n.mu.Lock()
	hostname := n.hostnameLocked()
	n.mu.Unlock()

	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Hostname: hostname}}}, nil
}

// Reboot acknowledges with an actor ID and reboots asynchronously; the persisted config becomes active.
func (s *machineServer) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	actorID, err := randomUUID()
	if err != nil {
		return nil, fmt.Errorf("generating actor ID: %w", err)
	}

	n := s.node

	n.mu.Lock()
	defer n.mu.Unlock()

	if err := n.requestRebootLocked(); err != nil {
		return nil, err
	}

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID}}}, nil
}
