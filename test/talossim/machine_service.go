package talossim

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// machineServer implements the subset of machined's MachineService the simulator supports; every other
// method answers Unimplemented through the embedded type. One machineServer serves one API instance.
type machineServer struct {
	machine.UnimplementedMachineServiceServer

	node *Node
	api  *apiServer
}

// Version reports the running Talos version, a metal platform, and RBAC once a config is active.
func (s *machineServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	n := s.node

	n.mu.Lock()
	configured := n.configuredLocked()
	tag := n.sw.running
	n.mu.Unlock()

	info := version.NewVersion()
	info.Tag = tag

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

	if err := n.requestRebootLocked("reboot", actorID); err != nil {
		return nil, err
	}

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID}}}, nil
}

// checkControlplane mirrors machinehelper.CheckControlplane: the MachineType resource must exist and name
// a control plane, otherwise the API named apiName answers Unimplemented.
func (n *Node) checkControlplane(ctx context.Context, apiName string) error {
	mt, err := safe.StateGetByID[*config.MachineType](ctx, n.st, config.MachineTypeID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return status.Errorf(codes.Unimplemented, "machine type is not set, cannot use %s API", apiName)
		}

		return fmt.Errorf("failed to get machine type: %w", err)
	}

	if !mt.MachineType().IsControlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", apiName)
	}

	return nil
}

// waitStreamEnd blocks a streaming handler that has nothing more to send until the client cancels, this
// API instance goes down (reboot) or the node stops, returning the matching error.
func (s *machineServer) waitStreamEnd(ctx context.Context, wake <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.api.down:
		return errAPIDown
	case <-s.node.stopCh:
		return errNodeStopped
	case <-wake:
		return nil
	}
}
