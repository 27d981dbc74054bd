package talossim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/status"
)

// DefaultSnapshotSize is the size of an EtcdSnapshot when EtcdCluster.SnapshotSize is zero: a 1 MiB
// etcd backend plus the trailing 32-byte SHA-256 etcd appends to snapshots. It is a whole number of
// 4 KiB pages plus 32, so snapshots of the default size are exactly this long.
const DefaultSnapshotSize = 1<<20 + 32

// Simulated backend sizes: the data in use grows with the revision; writes also leave fragmentation
// behind on every member until it is defragmented.
const (
	dbBaseSize         = 1 << 20
	dbBytesPerRevision = 512
	dbFragmentPerWrite = 256
	bootstrapRaftIndex = 4 // raft entries of a fresh single-member cluster
	bootstrapRaftTerm  = 2
	etcdStorageVersion = "3.6.0"
	// etcdProtocolVersion is the etcd of Talos v1.13.0 (machinery v1.13.0's
	// DefaultEtcdVersion), which the simulated cluster runs on every node.
	etcdProtocolVersion = "3.6.9"
	defaultClusterLabel = "etcd"
)

// EtcdMember is one member of a simulated etcd cluster as tests see it.
type EtcdMember struct {
	// ID is the etcd member ID, derived deterministically from the node's SystemUUID and join count.
	ID uint64
	// Hostname is the member name: the node's hostname when it joined.
	Hostname string
	// PeerURLs are the member's peer URLs (https://<node IP>:2380).
	PeerURLs []string
	// ClientURLs are the member's client URLs (https://<node IP>:2379).
	ClientURLs []string
	// DBSize is the member's backend size in bytes, fragmentation included.
	DBSize int64
	// DBSizeInUse is the part of DBSize holding live data.
	DBSizeInUse int64
}

// EtcdCluster is a simulated etcd cluster shared by the control-plane nodes given it in Options.Etcd.
// The zero value is an empty, not yet bootstrapped cluster. Set the exported fields before handing the
// cluster to a node; its state is then changed only through the nodes' APIs and the methods below.
//
// Nodes never talk to each other: membership, leadership, revision and backend sizes live here, and a
// control plane that boots (or is running when another node bootstraps the cluster) joins as a member.
type EtcdCluster struct {
	// Name seeds the snapshot contents of a freshly bootstrapped cluster; default "etcd".
	Name string
	// SnapshotSize is the approximate size in bytes of every EtcdSnapshot; default DefaultSnapshotSize. A
	// snapshot is a real etcd backend (a bbolt database of 4 KiB pages, padded with generated keys)
	// followed by its SHA-256, so its actual size is the smallest whole number of pages, at least 6, plus
	// 32 bytes that is at least SnapshotSize: always size%512 == 32, as `talosctl etcd snapshot` requires.
	SnapshotSize int
	// QuotaBackendBytes is etcd's --quota-backend-bytes: a write that leaves a member's backend
	// (fragmentation included) larger raises the cluster's NOSPACE alarm, which stays until it is disarmed,
	// as in etcd. Default DefaultQuotaBackendBytes.
	QuotaBackendBytes int64

	mu sync.Mutex
	// noSpace lists the members the NOSPACE alarm was raised for, until it is disarmed.
	noSpace   []uint64
	members   []*clusterMember
	leader    uint64
	revision  int64
	raftIndex uint64
	raftTerm  uint64
	dataSeed  uint64
	nodes     []*Node // attached nodes, in Start order
	hold      *SnapshotHold
}

// clusterMember is a member plus its share of backend fragmentation, and whether its node wiped its
// data without leaving the cluster.
type clusterMember struct {
	EtcdMember

	fragmented int64
	dataLost   bool
}

// Members returns the current members in join order (the bootstrap member first).
func (c *EtcdCluster) Members() []EtcdMember {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make([]EtcdMember, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, c.viewLocked(m))
	}

	return out
}

// Leader returns the leader's member ID, 0 while the cluster has no members.
func (c *EtcdCluster) Leader() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.leader
}

// Revision returns the key-value store revision (1 right after a fresh bootstrap).
func (c *EtcdCluster) Revision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.revision
}

// Bootstrapped reports whether the cluster has a member that still holds its data: a cluster whose
// members' nodes all lost their etcd data (their ETCD volume, see volumes_system.go) is gone, whatever its
// member list still says, and a Bootstrap (with or without a snapshot to recover) starts a new one.
func (c *EtcdCluster) Bootstrapped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.liveLocked()
}

func (c *EtcdCluster) liveLocked() bool {
	return slices.ContainsFunc(c.members, func(m *clusterMember) bool { return !m.dataLost })
}

// loseData records that member id's node wiped its etcd data directory without leaving the cluster
// first (a reset of its ETCD volume: of EPHEMERAL where ETCD is a directory on it, of the ETCD partition
// where a VolumeConfig promoted it): the member stays listed, as in etcd, but no longer holds the data.
func (c *EtcdCluster) loseData(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if m, _ := c.findLocked(id); m != nil {
		m.dataLost = true
	}
}

// AdvanceRevision simulates n writes (e.g. by Kubernetes): the revision and raft index grow by n, and
// so do the data in use and every member's fragmentation. It returns the resulting revision; a cluster
// without members (or n <= 0) is left unchanged.
func (c *EtcdCluster) AdvanceRevision(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()

	if len(c.members) == 0 || n <= 0 {
		return c.revision
	}

	c.revision += n
	c.raftIndex += uint64(n)

	for _, m := range c.members {
		m.fragmented += n * dbFragmentPerWrite
	}

	c.raiseNoSpaceLocked()

	return c.revision
}

// DefaultQuotaBackendBytes is etcd's default backend quota (2 GiB).
const DefaultQuotaBackendBytes = 2 << 30

func (c *EtcdCluster) quotaLocked() int64 {
	if c.QuotaBackendBytes > 0 {
		return c.QuotaBackendBytes
	}

	return DefaultQuotaBackendBytes
}

// raiseNoSpaceLocked raises NOSPACE for every member whose backend is over the quota.
func (c *EtcdCluster) raiseNoSpaceLocked() {
	for _, m := range c.members {
		if c.viewLocked(m).DBSize > c.quotaLocked() && !slices.Contains(c.noSpace, m.ID) {
			c.noSpace = append(c.noSpace, m.ID)
		}
	}
}

// alarmErrors are the alarms a member's status reports in its errors, in etcd's words.
func (c *EtcdCluster) alarmErrorsLocked() []string {
	var out []string
	for _, id := range c.noSpace {
		out = append(out, fmt.Sprintf("memberID:%d alarm:NOSPACE", id))
	}

	return out
}

// alarms lists the raised alarms as MachineService reports them.
func (c *EtcdCluster) alarms() []*machine.EtcdMemberAlarm {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make([]*machine.EtcdMemberAlarm, 0, len(c.noSpace))
	for _, id := range c.noSpace {
		out = append(out, &machine.EtcdMemberAlarm{MemberId: id, Alarm: machine.EtcdMemberAlarm_NOSPACE})
	}

	return out
}

// disarm clears every alarm and returns the ones it cleared; a member still over the quota raises
// NOSPACE again, as etcd does.
func (c *EtcdCluster) disarm() []*machine.EtcdMemberAlarm {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make([]*machine.EtcdMemberAlarm, 0, len(c.noSpace))
	for _, id := range c.noSpace {
		out = append(out, &machine.EtcdMemberAlarm{MemberId: id, Alarm: machine.EtcdMemberAlarm_NOSPACE})
	}

	c.noSpace = nil
	c.raiseNoSpaceLocked()

	return out
}

// SetQuotaBackendBytes changes the backend quota of a running cluster (QuotaBackendBytes, which is read
// only before the cluster is handed to a node); the next write raises NOSPACE for a member over it.
func (c *EtcdCluster) SetQuotaBackendBytes(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.QuotaBackendBytes = n
}

// Alarmed reports whether the NOSPACE alarm is raised.
func (c *EtcdCluster) Alarmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	return len(c.noSpace) > 0
}

// viewLocked returns m with its backend sizes filled in.
func (c *EtcdCluster) viewLocked(m *clusterMember) EtcdMember {
	v := m.EtcdMember
	v.PeerURLs = slices.Clone(m.PeerURLs)
	v.ClientURLs = slices.Clone(m.ClientURLs)
	v.DBSizeInUse = dbBaseSize + c.revision*dbBytesPerRevision
	v.DBSize = v.DBSizeInUse + m.fragmented

	return v
}

// findLocked returns the member with id and its index, or nil.
func (c *EtcdCluster) findLocked(id uint64) (*clusterMember, int) {
	for i, m := range c.members {
		if m.ID == id {
			return m, i
		}
	}

	return nil, -1
}

// has reports whether id is a current member.
func (c *EtcdCluster) has(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	m, _ := c.findLocked(id)

	return m != nil
}

// bootstrap makes m the single member and leader of a new cluster whose data is identified by seed and
// revision (a fresh cluster, or one restored from a snapshot), dropping members whose data is gone;
// false if a member still holds the data.
func (c *EtcdCluster) bootstrap(m EtcdMember, seed uint64, revision int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.liveLocked() {
		return false
	}

	c.noSpace = nil

	c.members = []*clusterMember{{EtcdMember: m}}
	c.leader = m.ID
	c.dataSeed = seed
	c.revision = revision
	c.raftIndex = bootstrapRaftIndex + uint64(revision)
	c.raftTerm = bootstrapRaftTerm

	return true
}

// join adds m as a voting member; false if the cluster has no member holding the data to join.
func (c *EtcdCluster) join(m EtcdMember) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	if !c.liveLocked() {
		return false
	}

	c.members = append(c.members, &clusterMember{EtcdMember: m})
	c.raftIndex++

	return true
}

// remove drops member id; a removed leader hands leadership to the first remaining member. False if id
// is not a member.
func (c *EtcdCluster) remove(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	m, i := c.findLocked(id)
	if m == nil {
		return false
	}

	c.members = slices.Delete(c.members, i, i+1)
	c.raftIndex++

	if c.leader == id {
		c.leader = 0

		if len(c.members) > 0 {
			c.leader = c.members[0].ID
			c.raftTerm++
		}
	}

	return true
}

// forfeit moves leadership away from member id to the first other member, like Talos's
// ForfeitLeadership: it returns the new leader's name, or "" when id is not the leader.
func (c *EtcdCluster) forfeit(id uint64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if len(c.members) == 1 {
		return "", fmt.Errorf("failed to forfeit leadership: cannot forfeit leadership, only one member")
	}

	if m, _ := c.findLocked(id); m == nil {
		return "", fmt.Errorf("failed to forfeit leadership: failed to find %q in list of etcd members", formatMemberID(id))
	}

	if c.leader != id {
		return "", nil
	}

	for _, m := range c.members {
		if m.ID != id {
			c.leader = m.ID
			c.raftTerm++
			c.raftIndex++

			return m.Hostname, nil
		}
	}

	return "", nil
}

// defragment compacts member id's backend; false if id is not a member.
func (c *EtcdCluster) defragment(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	m, _ := c.findLocked(id)
	if m == nil {
		return false
	}

	m.fragmented = 0

	return true
}

// memberList returns the members in the MachineService form.
func (c *EtcdCluster) memberList() []*machine.EtcdMember {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make([]*machine.EtcdMember, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, &machine.EtcdMember{
			Id:         m.ID,
			Hostname:   m.Hostname,
			PeerUrls:   slices.Clone(m.PeerURLs),
			ClientUrls: slices.Clone(m.ClientURLs),
		})
	}

	return out
}

// status returns what etcd's Status call reports for member id; false if id is not a member.
func (c *EtcdCluster) status(id uint64) (*machine.EtcdMemberStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()

	m, _ := c.findLocked(id)
	if m == nil {
		return nil, false
	}

	v := c.viewLocked(m)

	return &machine.EtcdMemberStatus{
		MemberId:         id,
		ProtocolVersion:  etcdProtocolVersion,
		DbSize:           v.DBSize,
		DbSizeInUse:      v.DBSizeInUse,
		Leader:           c.leader,
		Errors:           c.alarmErrorsLocked(),
		RaftIndex:        c.raftIndex,
		RaftTerm:         c.raftTerm,
		RaftAppliedIndex: c.raftIndex,
		StorageVersion:   etcdStorageVersion,
	}, true
}

// PrepareSnapshot builds the snapshot of the cluster's data at the current revision ahead of time, so
// that the next EtcdSnapshot streams at once, as a real node streams from its database, instead of
// after the build (most of a minute for SnapshotSize 256 MiB under the race detector).
func (c *EtcdCluster) PrepareSnapshot() error {
	_, err := c.snapshot()

	return err
}

// SnapshotHold pauses the next EtcdSnapshot stream of the cluster once it has sent a number of bytes,
// until released: what lets a test tell that a download streams through every hop, by how far the
// client got while the node sends nothing more.
type SnapshotHold struct {
	at      int
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// HoldSnapshot makes the next EtcdSnapshot stream pause after at bytes (rounded up to a whole chunk).
func (c *EtcdCluster) HoldSnapshot(at int) *SnapshotHold {
	h := &SnapshotHold{at: at, reached: make(chan struct{}), release: make(chan struct{})}

	c.mu.Lock()
	c.hold = h
	c.mu.Unlock()

	return h
}

// Reached is closed once the stream has sent the hold's bytes and paused.
func (h *SnapshotHold) Reached() <-chan struct{} { return h.reached }

// Release lets the stream go on; calling it again does nothing.
func (h *SnapshotHold) Release() { h.once.Do(func() { close(h.release) }) }

// takeHold returns the hold for the stream starting now, if any, and clears it.
func (c *EtcdCluster) takeHold() *SnapshotHold {
	c.mu.Lock()
	defer c.mu.Unlock()

	h := c.hold
	c.hold = nil

	return h
}

// pause blocks a stream that has sent sent bytes at the hold, until it is released or ctx ends.
func (h *SnapshotHold) pause(ctx context.Context, sent int) error {
	if h == nil || sent < h.at {
		return nil
	}

	select {
	case <-h.reached:
		return nil
	default:
	}

	close(h.reached)

	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// snapshot returns the snapshot of the cluster's data at the current revision.
func (c *EtcdCluster) snapshot() ([]byte, error) {
	c.mu.Lock()
	seed, revision := c.dataSeed, c.revision
	c.mu.Unlock()

	return buildSnapshot(seed, revision, c.SnapshotSize)
}

// freshSeed identifies the data of a cluster bootstrapped from scratch.
func (c *EtcdCluster) freshSeed() uint64 {
	name := c.Name
	if name == "" {
		name = defaultClusterLabel
	}

	sum := sha256.Sum256([]byte("talossim etcd data " + name))

	return binary.BigEndian.Uint64(sum[:8])
}

// attach registers n as a node of the cluster, so it can join when another node bootstraps.
func (c *EtcdCluster) attach(n *Node) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.nodes = append(c.nodes, n)
}

// detach forgets a stopped node.
func (c *EtcdCluster) detach(n *Node) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.nodes = slices.DeleteFunc(c.nodes, func(o *Node) bool { return o == n })
}

// attached returns the attached nodes in Start order.
func (c *EtcdCluster) attached() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()

	return slices.Clone(c.nodes)
}

// memberIDFor derives a node's etcd member ID for its joins-th join (etcd IDs are never 0).
func memberIDFor(systemUUID string, joins int) uint64 {
	sum := sha256.Sum256(fmt.Appendf(nil, "talossim etcd member %s/%d", systemUUID, joins))

	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// formatMemberID renders a member ID like etcd.FormatMemberID.
func formatMemberID(id uint64) string {
	return fmt.Sprintf("%016x", id)
}
