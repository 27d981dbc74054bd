package talossim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// snapshotChunkSize is the size of the common.Data chunks of an EtcdSnapshot stream.
const snapshotChunkSize = 32 * 1024

var (
	// errEtcdNotRunning answers calls that need this node's etcd member when it has none; a real node's
	// etcd client would fail to connect (or time out) instead.
	errEtcdNotRunning = status.Error(codes.Unavailable, "etcd is not running on this node")
	// errEtcdUnavailable answers cluster-wide calls when the cluster has no members.
	errEtcdUnavailable = status.Error(codes.Unavailable, "etcd cluster is not available")
	// errEtcdDataNotEmpty is Talos's answer to a Bootstrap of a node (or cluster) that already has data.
	errEtcdDataNotEmpty = status.Error(codes.AlreadyExists, "etcd data directory is not empty")
)

// etcdLocal is a node's view of its own etcd: the member ID its data directory belongs to (0 = empty),
// how often it joined (IDs differ per join), whether EtcdLeaveCluster stopped the service until the next
// boot, and the file holding a snapshot uploaded with EtcdRecover (Talos keeps it in /var, on EPHEMERAL).
type etcdLocal struct {
	memberID uint64
	joins    int
	stopped  bool
	recovery string
}

// dropRecoveryLocked removes the snapshot uploaded with EtcdRecover, if any.
func (n *Node) dropRecoveryLocked() {
	if n.etcdLocal.recovery != "" {
		os.Remove(n.etcdLocal.recovery) //nolint:errcheck // a temporary file
		n.etcdLocal.recovery = ""
	}
}

// isControlPlaneLocked reports whether the active config makes this node a control plane.
func (n *Node) isControlPlaneLocked() bool {
	return n.active != nil && n.active.Machine() != nil && n.active.Machine().Type().IsControlPlane()
}

// localMemberLocked returns this node's member ID if its etcd is a current member of the cluster.
func (n *Node) localMemberLocked() (uint64, bool) {
	id := n.etcdLocal.memberID

	return id, id != 0 && n.etcd.has(id)
}

// newMemberLocked describes this node as the etcd member of its next join.
func (n *Node) newMemberLocked() EtcdMember {
	ip := n.listenIP.String()
	if len(n.opts.Addresses) > 0 {
		ip = n.opts.Addresses[0].Addr().String()
	}

	url := func(port int) []string {
		return []string{"https://" + net.JoinHostPort(ip, strconv.Itoa(port))}
	}

	n.etcdLocal.joins++

	return EtcdMember{
		ID:         memberIDFor(n.opts.SystemUUID, n.etcdLocal.joins),
		Hostname:   n.hostnameLocked(),
		PeerURLs:   url(constants.EtcdPeerPort),
		ClientURLs: url(constants.EtcdClientPort),
	}
}

// setLocalMemberLocked records this node's member ID (0: none), its etcd service event, and republishes
// the etcd.Member "local" resource.
func (n *Node) setLocalMemberLocked(id uint64, action machine.ServiceStateEvent_Action, msg string) error {
	n.etcdLocal.memberID = id
	n.events.add(&machine.ServiceStateEvent{Service: "etcd", Action: action, Message: msg}, "")

	return n.publishLocked()
}

// joinEtcdLocked joins the cluster when this node is a running control plane with an empty etcd data
// directory and another member has bootstrapped the cluster, as Talos's etcd service does.
func (n *Node) joinEtcdLocked() {
	if n.stopped || n.phase != PhaseRunning || !n.isControlPlaneLocked() ||
		n.etcdLocal.memberID != 0 || n.etcdLocal.stopped || !n.etcd.Bootstrapped() {
		return
	}

	m := n.newMemberLocked()
	if !n.etcd.join(m) {
		return
	}

	if err := n.setLocalMemberLocked(m.ID, machine.ServiceStateEvent_RUNNING, "Health check successful"); err != nil {
		log.Printf("talossim: publishing etcd member: %v", err)
	}
}

// joinEtcd is joinEtcdLocked for callers not holding the node lock.
func (n *Node) joinEtcd() {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.joinEtcdLocked()
}

// Bootstrap bootstraps etcd on a running control plane: a fresh single-member cluster, or one restored
// from the snapshot uploaded with EtcdRecover when RecoverEtcd is set. The other running control planes
// sharing the cluster then join it. A snapshot of the cluster's real etcd (not one the simulator
// generated) is restored into the Kubernetes control plane's etcd, so its objects come back.
func (s *machineServer) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	n := s.node

	restore, err := n.bootstrapEtcd(ctx, in)
	if err != nil {
		return nil, err
	}

	if k := n.opts.Kubernetes; k != nil {
		n.mu.Lock()
		cfg := n.active
		n.mu.Unlock()

		if restore != "" {
			err = k.recoverEtcd(cfg, restore, in.GetRecoverSkipHashCheck())
		} else {
			k.bootstrap(cfg)
		}
	}

	if restore != "" {
		os.Remove(restore) //nolint:errcheck // consumed, like the snapshot file on a real node
	}

	if err != nil {
		return nil, fmt.Errorf("failed to recover etcd: %w", err)
	}

	for _, other := range n.etcd.attached() {
		if other != n {
			other.joinEtcd()
		}
	}

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// bootstrapEtcd runs Bootstrap's checks and makes this node the cluster's first member. When it
// recovers from a snapshot of a real etcd, it returns the snapshot's file, which the caller owns.
func (n *Node) bootstrapEtcd(ctx context.Context, in *machine.BootstrapRequest) (restore string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.phase != PhaseRunning {
		return "", status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	if err := n.checkControlplane(ctx, "bootstrap"); err != nil {
		return "", err
	}

	if n.etcdLocal.memberID != 0 || n.etcd.Bootstrapped() {
		return "", errEtcdDataNotEmpty
	}

	seed, revision := n.etcd.freshSeed(), int64(1)

	if in.GetRecoverEtcd() {
		if n.etcdLocal.recovery == "" {
			return "", status.Error(codes.FailedPrecondition, "no etcd snapshot was uploaded with EtcdRecover")
		}

		data, err := parseSnapshotFile(n.etcdLocal.recovery, in.GetRecoverSkipHashCheck())
		if err != nil {
			return "", fmt.Errorf("failed to recover etcd: %w", err)
		}

		revision = data.revision
		if !data.foreign {
			seed = data.seed
		}

		if data.foreign && n.opts.Kubernetes != nil {
			restore = n.etcdLocal.recovery
			n.etcdLocal.recovery = "" // handed to the caller
		}
	}

	m := n.newMemberLocked()
	if !n.etcd.bootstrap(m, seed, revision) {
		if restore != "" {
			os.Remove(restore) //nolint:errcheck // a temporary file
		}

		return "", errEtcdDataNotEmpty
	}

	n.dropRecoveryLocked() // consumed by the restore, like the snapshot file on a real node

	return restore, n.setLocalMemberLocked(m.ID, machine.ServiceStateEvent_RUNNING, "Health check successful")
}

// etcdCall runs the checks every Etcd* handler shares: control plane only (apiName as Talos names it),
// then, with the node locked, this node's member ID when local is set (the call uses the local etcd) or
// a bootstrapped cluster otherwise. f runs with the node locked.
func (n *Node) etcdCall(ctx context.Context, apiName string, local bool, f func(memberID uint64) error) error {
	if err := n.checkControlplane(ctx, apiName); err != nil {
		return err
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	id, running := n.localMemberLocked()

	switch {
	case local && !running:
		return errEtcdNotRunning
	case !n.etcd.Bootstrapped():
		return errEtcdUnavailable
	}

	return f(id)
}

// EtcdMemberList lists the cluster's members; QueryLocal asks this node's own member.
func (s *machineServer) EtcdMemberList(ctx context.Context, in *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	var members []*machine.EtcdMember

	if err := s.node.etcdCall(ctx, "member list", in.GetQueryLocal(), func(uint64) error {
		members = s.node.etcd.memberList()

		return nil
	}); err != nil {
		return nil, err
	}

	legacy := make([]string, 0, len(members))
	for _, m := range members {
		legacy = append(legacy, m.GetHostname())
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{{LegacyMembers: legacy, Members: members}}}, nil
}

// EtcdLeaveCluster removes this node's member from the cluster and stops its etcd until the next boot,
// emptying the data directory.
func (s *machineServer) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	n := s.node

	if err := n.etcdCall(ctx, "etcd leave", false, func(uint64) error {
		id := n.etcdLocal.memberID
		if id == 0 {
			return errEtcdNotRunning
		}

		n.etcd.remove(id) // a member someone else removed already counts as left, as in Talos
		n.etcdLocal.stopped = true

		return n.setLocalMemberLocked(0, machine.ServiceStateEvent_FINISHED, "Service finished successfully")
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// EtcdRemoveMemberByID removes any member; an unknown ID is NotFound with etcd's wording.
func (s *machineServer) EtcdRemoveMemberByID(ctx context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	if err := s.node.etcdCall(ctx, "etcd remove member", false, func(uint64) error {
		if !s.node.etcd.remove(in.GetMemberId()) {
			return status.Errorf(codes.NotFound, "failed to remove member %d: etcdserver: member not found", in.GetMemberId())
		}

		return nil
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
}

// EtcdForfeitLeadership moves leadership from this node's member to another one and names the new
// leader; Member is empty when this node was not the leader.
func (s *machineServer) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	var leader string

	if err := s.node.etcdCall(ctx, "etcd forfeit leadership", true, func(id uint64) (err error) {
		leader, err = s.node.etcd.forfeit(id)

		return err
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{Member: leader}}}, nil
}

// EtcdDefragment compacts this node's member's backend (DbSize drops to DbSizeInUse).
func (s *machineServer) EtcdDefragment(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDefragmentResponse, error) {
	if err := s.node.etcdCall(ctx, "etcd defragment", true, func(id uint64) error {
		s.node.etcd.defragment(id)

		return nil
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdDefragmentResponse{Messages: []*machine.EtcdDefragment{{}}}, nil
}

// EtcdAlarmList lists the cluster's raised alarms, as etcd's alarm list does.
func (s *machineServer) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	var alarms []*machine.EtcdMemberAlarm

	if err := s.node.etcdCall(ctx, "etcd alarm list", true, func(uint64) error {
		alarms = s.node.etcd.alarms()

		return nil
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{MemberAlarms: alarms}}}, nil
}

// EtcdAlarmDisarm disarms every alarm and lists the ones it disarmed; a member still over its quota
// raises NOSPACE again at once.
func (s *machineServer) EtcdAlarmDisarm(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmDisarmResponse, error) {
	var alarms []*machine.EtcdMemberAlarm

	if err := s.node.etcdCall(ctx, "etcd alarm disarm", true, func(uint64) error {
		alarms = s.node.etcd.disarm()

		return nil
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdAlarmDisarmResponse{Messages: []*machine.EtcdAlarmDisarm{{MemberAlarms: alarms}}}, nil
}

// EtcdStatus reports this node's member status: ID, DB sizes, leader, raft index and term.
func (s *machineServer) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	var st *machine.EtcdMemberStatus

	if err := s.node.etcdCall(ctx, "etcd status", true, func(id uint64) error {
		st, _ = s.node.etcd.status(id)

		return nil
	}); err != nil {
		return nil, err
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: st}}}, nil
}

// EtcdSnapshot streams a snapshot of the cluster's data from this node's member: the snapshot of the
// Kubernetes control plane's real etcd when one runs for this node's cluster and EtcdCluster.SnapshotSize
// is not set; otherwise a generated etcd backend snapshot, the same bytes for the same data and
// revision, about EtcdCluster.SnapshotSize long.
func (s *machineServer) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	var (
		snap     []byte
		endpoint string
	)

	if err := s.node.etcdCall(srv.Context(), "etcd snapshot", true, func(uint64) (err error) {
		if ep := clusterEndpoint(s.node.active); ep != nil {
			endpoint = ep.String()
		}

		if s.node.opts.Kubernetes != nil && s.node.etcd.SnapshotSize == 0 && endpoint != "" {
			return nil
		}

		snap, err = s.node.etcd.snapshot()

		return err
	}); err != nil {
		return err
	}

	if snap == nil {
		rc, ok, err := s.node.opts.Kubernetes.etcdSnapshot(srv.Context(), endpoint)
		if err != nil {
			return status.Errorf(codes.Unavailable, "failed to take etcd snapshot: %v", err)
		}

		if ok {
			defer rc.Close() //nolint:errcheck // read-only

			return streamChunks(srv, rc)
		}

		if snap, err = s.node.etcd.snapshot(); err != nil {
			return err
		}
	}

	hold, sent := s.node.etcd.takeHold(), 0

	for chunk := range slices.Chunk(snap, snapshotChunkSize) {
		if err := srv.Send(&common.Data{Bytes: chunk}); err != nil {
			return err
		}

		sent += len(chunk)

		if err := hold.pause(srv.Context(), sent); err != nil {
			return err
		}
	}

	return nil
}

// streamChunks sends r as common.Data chunks of snapshotChunkSize.
func streamChunks(srv machine.MachineService_EtcdSnapshotServer, r io.Reader) error {
	buf := make([]byte, snapshotChunkSize)

	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := srv.Send(&common.Data{Bytes: buf[:n]}); serr != nil {
				return serr
			}
		}

		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return status.Errorf(codes.Unavailable, "failed to take etcd snapshot: %v", err)
		}
	}
}

// EtcdRecover receives a snapshot for a later Bootstrap with RecoverEtcd, replacing an earlier upload.
func (s *machineServer) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	n := s.node

	n.mu.Lock()
	ready := n.phase == PhaseRunning
	n.mu.Unlock()

	if !ready {
		return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	}

	if err := n.checkControlplane(srv.Context(), "etcd recover"); err != nil {
		return err
	}

	path, err := receiveToFile(srv)
	if err != nil {
		return err
	}

	n.mu.Lock()
	n.dropRecoveryLocked()
	n.etcdLocal.recovery = path
	n.mu.Unlock()

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

// receiveToFile writes an EtcdRecover upload to a new temporary file, so that a snapshot of any size
// never sits in memory, and returns its path.
func receiveToFile(srv machine.MachineService_EtcdRecoverServer) (_ string, err error) {
	f, err := os.CreateTemp("", "talossim-etcd-recover-*.snapshot")
	if err != nil {
		return "", err
	}

	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}

		if err != nil {
			os.Remove(f.Name()) //nolint:errcheck // best effort
		}
	}()

	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return f.Name(), nil
		}

		if err != nil {
			return "", err
		}

		if _, err = f.Write(msg.GetBytes()); err != nil {
			return "", err
		}
	}
}
