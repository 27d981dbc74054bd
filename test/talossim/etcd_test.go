package talossim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// memberNames returns the hostnames of an EtcdMemberList response.
func memberNames(resp *machineapi.EtcdMemberListResponse) []string {
	var names []string
	for _, m := range resp.GetMessages()[0].GetMembers() {
		names = append(names, m.GetHostname())
	}

	return names
}

// localMemberID reads the etcd.Member "local" resource through the client.
func localMemberID(t *testing.T, c *client.Client) string {
	t.Helper()

	m, err := safe.StateGetByID[*etcd.Member](testContext(t), c.COSI, etcd.LocalMemberID)
	if err != nil {
		t.Fatalf("reading local etcd member: %v", err)
	}

	return m.TypedSpec().MemberID
}

func TestEtcdBootstrapSingleNode(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, simOptions())

	// Before bootstrap: etcd waits, the etcd calls have no etcd to talk to, recovery has nothing to use.
	_, err := admin.EtcdStatus(ctx)
	wantCode(t, err, codes.Unavailable, "etcd is not running on this node")

	_, err = admin.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	wantCode(t, err, codes.Unavailable, "etcd cluster is not available")

	wantCode(t, admin.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true}), codes.FailedPrecondition, "EtcdRecover")

	if err = admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	wantCode(t, admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}), codes.AlreadyExists, "etcd data directory is not empty")

	members := n.etcd.Members()
	if len(members) != 1 || members[0].Hostname != "sim-node-1" || n.etcd.Leader() != members[0].ID ||
		!slices.Equal(members[0].PeerURLs, []string{"https://10.5.0.2:2380"}) || !slices.Equal(members[0].ClientURLs, []string{"https://10.5.0.2:2379"}) {
		t.Fatalf("members = %+v, leader %x", members, n.etcd.Leader())
	}

	id := members[0].ID
	if id != memberIDFor(simOptions().SystemUUID, 1) {
		t.Fatalf("member ID %x is not derived from the node", id)
	}

	if got := localMemberID(t, admin); got != etcd.FormatMemberID(id) {
		t.Fatalf("local member resource = %s, want %s", got, etcd.FormatMemberID(id))
	}

	for _, local := range []bool{false, true} {
		resp, err := admin.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{QueryLocal: local})
		if err != nil {
			t.Fatalf("EtcdMemberList(local=%v): %v", local, err)
		}

		msg := resp.GetMessages()[0]
		if len(msg.GetMembers()) != 1 || msg.GetMembers()[0].GetId() != id || !slices.Equal(msg.GetLegacyMembers(), []string{"sim-node-1"}) {
			t.Fatalf("EtcdMemberList(local=%v) = %v", local, msg)
		}
	}

	// Status, writes, defragmentation.
	n.etcd.AdvanceRevision(100)

	st := etcdStatus(t, admin)
	if st.GetMemberId() != id || st.GetLeader() != id || st.GetRaftTerm() != bootstrapRaftTerm || st.GetRaftIndex() == 0 ||
		st.GetDbSize() <= st.GetDbSizeInUse() || st.GetProtocolVersion() != "3.6.9" || st.GetStorageVersion() != "3.6.0" {
		t.Fatalf("EtcdStatus = %v", st)
	}

	if _, err = admin.EtcdDefragment(ctx); err != nil {
		t.Fatalf("EtcdDefragment: %v", err)
	}

	if st = etcdStatus(t, admin); st.GetDbSize() != st.GetDbSizeInUse() {
		t.Fatalf("after defragment DbSize %d != DbSizeInUse %d", st.GetDbSize(), st.GetDbSizeInUse())
	}

	// Over the backend quota, writes raise NOSPACE; it stays after the defragmentation that freed the
	// space, until it is disarmed.
	n.etcd.SetQuotaBackendBytes(st.GetDbSizeInUse() + 50*dbFragmentPerWrite)
	n.etcd.AdvanceRevision(100)

	alarms, err := admin.EtcdAlarmList(ctx)
	if err != nil || len(alarms.GetMessages()[0].GetMemberAlarms()) != 1 ||
		alarms.GetMessages()[0].GetMemberAlarms()[0].GetAlarm() != machineapi.EtcdMemberAlarm_NOSPACE {
		t.Fatalf("EtcdAlarmList over the quota = %v, %v", alarms, err)
	}

	if st = etcdStatus(t, admin); !slices.Equal(st.GetErrors(), []string{fmt.Sprintf("memberID:%d alarm:NOSPACE", id)}) {
		t.Fatalf("EtcdStatus errors = %q", st.GetErrors())
	}

	n.etcd.SetQuotaBackendBytes(st.GetDbSizeInUse() + 10*dbFragmentPerWrite)

	if _, err = admin.EtcdDefragment(ctx); err != nil {
		t.Fatal(err)
	}

	if !n.etcd.Alarmed() {
		t.Fatal("defragmenting disarmed NOSPACE by itself")
	}

	disarmed, err := admin.EtcdAlarmDisarm(ctx)
	if err != nil || len(disarmed.GetMessages()[0].GetMemberAlarms()) != 1 || n.etcd.Alarmed() {
		t.Fatalf("EtcdAlarmDisarm = %v, %v; alarmed %v", disarmed, err, n.etcd.Alarmed())
	}

	n.etcd.SetQuotaBackendBytes(0)

	// A lone member cannot hand leadership over; unknown members cannot be removed.
	_, err = admin.EtcdForfeitLeadership(ctx, &machineapi.EtcdForfeitLeadershipRequest{})
	wantCode(t, err, codes.Unknown, "cannot forfeit leadership, only one member")

	err = admin.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: 42})
	wantCode(t, err, codes.NotFound, "failed to remove member 42: etcdserver: member not found")
}

// etcdStatus returns the node's EtcdStatus member status, failing the test on error.
func etcdStatus(t *testing.T, c *client.Client) *machineapi.EtcdMemberStatus {
	t.Helper()

	resp, err := c.EtcdStatus(testContext(t))
	if err != nil {
		t.Fatalf("EtcdStatus: %v", err)
	}

	return resp.GetMessages()[0].GetMemberStatus()
}

func TestEtcdThreeControlPlanes(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	cluster := &EtcdCluster{Name: "three"}

	nodes := make([]*Node, 3)
	admins := make([]*client.Client, 3)

	for i := range nodes {
		nodes[i], admins[i] = installedNode(t, cl, Options{Hostname: fmt.Sprintf("cp-%d", i+1), Etcd: cluster})
	}

	if cluster.Bootstrapped() {
		t.Fatal("cluster bootstrapped before Bootstrap")
	}

	if err := admins[0].Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	// The other running control planes joined; bootstrapping again anywhere is refused.
	wantCode(t, admins[2].Bootstrap(ctx, &machineapi.BootstrapRequest{}), codes.AlreadyExists, "")

	resp, err := admins[2].EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	if err != nil {
		t.Fatalf("EtcdMemberList: %v", err)
	}

	if got := memberNames(resp); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Fatalf("members = %v", got)
	}

	ids := make([]uint64, 3)
	for i, m := range cluster.Members() {
		ids[i] = m.ID

		if got := localMemberID(t, admins[i]); got != etcd.FormatMemberID(m.ID) {
			t.Fatalf("cp-%d local member = %s, want %s", i+1, got, etcd.FormatMemberID(m.ID))
		}
	}

	// Forfeiting on a follower is a no-op; on the leader it names the new leader.
	if got := forfeit(t, admins[1]); got != "" {
		t.Fatalf("follower forfeit = %q", got)
	}

	if got := forfeit(t, admins[0]); got != "cp-2" {
		t.Fatalf("leader forfeit = %q, want cp-2", got)
	}

	if st := etcdStatus(t, admins[2]); st.GetLeader() != ids[1] || st.GetMemberId() != ids[2] || st.GetRaftTerm() != bootstrapRaftTerm+1 {
		t.Fatalf("status on cp-3 after forfeit = %v", st)
	}

	// Two members would lose quorum during an upgrade.
	if err = admins[0].EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: ids[1]}); err != nil {
		t.Fatalf("EtcdRemoveMemberByID: %v", err)
	}

	if cluster.Leader() != ids[0] {
		t.Fatalf("leader after removing the leader = %x, want cp-1 %x", cluster.Leader(), ids[0])
	}

	_, err = admins[0].UpgradeWithOptions(ctx, client.WithUpgradeImage("siderolabs/installer:v1.13.1"))
	wantCode(t, err, codes.Unknown, "etcd member count(2) is insufficient to maintain quorum")

	// The removed node's etcd has failed.
	if got := serviceState(t, admins[1], "etcd"); got != serviceFailed {
		t.Fatalf("removed member's etcd = %s", got)
	}

	// cp-3 leaves: its etcd stops until the next boot, then it joins again with a new member ID.
	if err = admins[2].EtcdLeaveCluster(ctx, &machineapi.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatalf("EtcdLeaveCluster: %v", err)
	}

	if got := cluster.Members(); len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("members after leave = %+v", got)
	}

	_, err = admins[2].EtcdStatus(ctx)
	wantCode(t, err, codes.Unavailable, "etcd is not running on this node")

	if got := serviceState(t, admins[2], "etcd"); got != serviceFinished {
		t.Fatalf("etcd after leave = %s", got)
	}

	if err = admins[2].Reboot(ctx); err != nil {
		t.Fatalf("Reboot: %v", err)
	}

	if err = nodes[2].WaitPhase(ctx, PhaseRunning); err != nil {
		t.Fatal(err)
	}

	members := cluster.Members()
	if len(members) != 2 || members[1].Hostname != "cp-3" || members[1].ID == ids[2] || members[1].ID != memberIDFor(nodes[2].opts.SystemUUID, 2) {
		t.Fatalf("members after cp-3 rebooted = %+v (old cp-3 ID %x)", members, ids[2])
	}
}

// forfeit calls EtcdForfeitLeadership and returns the new leader's name.
func forfeit(t *testing.T, c *client.Client) string {
	t.Helper()

	resp, err := c.EtcdForfeitLeadership(testContext(t), &machineapi.EtcdForfeitLeadershipRequest{})
	if err != nil {
		t.Fatalf("EtcdForfeitLeadership: %v", err)
	}

	return resp.GetMessages()[0].GetMember()
}

func TestEtcdWorkerRefuses(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	_, admin := workerNode(t, cl, Options{})

	const only = " is only available on control plane nodes"

	wantCode(t, admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}), codes.Unimplemented, "bootstrap"+only)

	_, err := admin.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	wantCode(t, err, codes.Unimplemented, "member list"+only)

	_, err = admin.EtcdStatus(ctx)
	wantCode(t, err, codes.Unimplemented, "etcd status"+only)

	_, err = admin.EtcdDefragment(ctx)
	wantCode(t, err, codes.Unimplemented, "etcd defragment"+only)

	_, err = admin.EtcdForfeitLeadership(ctx, &machineapi.EtcdForfeitLeadershipRequest{})
	wantCode(t, err, codes.Unimplemented, "etcd forfeit leadership"+only)

	wantCode(t, admin.EtcdLeaveCluster(ctx, &machineapi.EtcdLeaveClusterRequest{}), codes.Unimplemented, "etcd leave"+only)
	wantCode(t, admin.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: 1}), codes.Unimplemented, "etcd remove member"+only)

	_, err = snapshot(ctx, admin)
	wantCode(t, err, codes.Unimplemented, "etcd snapshot"+only)

	_, err = admin.EtcdRecover(ctx, bytes.NewReader([]byte("x")))
	wantCode(t, err, codes.Unimplemented, "etcd recover"+only)

	_, err = admin.Kubeconfig(ctx)
	wantCode(t, err, codes.Unimplemented, "kubeconfig"+only)
}

func TestEtcdSnapshotAndRecover(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)

	const size = 300_001 // a snapshot of 74 pages + 32 bytes: not a multiple of the chunk size

	source := &EtcdCluster{Name: "source", SnapshotSize: size}
	n, admin := bootstrappedNode(t, cl, Options{Etcd: source})
	backup := roleClients(t, n, cl)[role.EtcdBackup]

	if rev := source.AdvanceRevision(41); rev != 42 {
		t.Fatalf("revision = %d, want 42", rev)
	}

	first, err := snapshot(ctx, admin)
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	second, err := snapshot(ctx, backup)
	if err != nil {
		t.Fatalf("os:etcd:backup EtcdSnapshot: %v", err)
	}

	if len(first) != wantSnapshotSize(size) || len(first) != 74*4096+32 || !bytes.Equal(first, second) {
		t.Fatalf("snapshots at one revision: %d and %d bytes, equal %v", len(first), len(second), bytes.Equal(first, second))
	}

	// A held stream pauses after the bytes asked for, which the client can
	// read, and sends the rest once released.
	hold := source.HoldSnapshot(3 * snapshotChunkSize)
	r, err := admin.EtcdSnapshot(ctx, &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	head := make([]byte, 3*snapshotChunkSize)
	if _, err := io.ReadFull(r, head); err != nil || !bytes.Equal(head, first[:len(head)]) {
		t.Fatalf("the first chunks of a held snapshot: %v", err)
	}

	<-hold.Reached()
	hold.Release()

	if rest, err := readAll(r); err != nil || !bytes.Equal(append(head, rest...), first) {
		t.Fatalf("a released snapshot: %d more bytes, %v", len(rest), err)
	}

	source.AdvanceRevision(1)

	later, err := snapshot(ctx, admin)
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	if len(later) != len(first) || bytes.Equal(first, later) {
		t.Fatal("a snapshot at a later revision must differ")
	}

	if st := readSnapshotStatus(t, first); st.revision != 42 || st.totalSize != int64(len(first)-sha256.Size) {
		t.Fatalf("revision-42 snapshot status = %+v", st)
	}

	// Restore the revision-42 snapshot on a fresh control plane of another cluster.
	target := &EtcdCluster{Name: "target", SnapshotSize: size}
	restored, restoredAdmin := installedNode(t, cl, Options{Etcd: target})

	// Corrupt a byte inside a padding value: the hash check catches it, and the database still opens when
	// the check is skipped.
	entry := bytes.Index(first, []byte(snapshotKeyPrefix+"00000010"))
	if entry < 0 {
		t.Fatal("no padding entry 0x10 in the snapshot")
	}

	corrupt := bytes.Clone(first)
	corrupt[entry+100] ^= 0xff

	if _, err = restoredAdmin.EtcdRecover(ctx, bytes.NewReader(corrupt)); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	wantCode(t, restoredAdmin.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true}), codes.Unknown, "integrity check failed")

	if target.Bootstrapped() {
		t.Fatal("a failed recovery bootstrapped the cluster")
	}

	if _, err = restoredAdmin.EtcdRecover(ctx, bytes.NewReader(first)); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	if err = restoredAdmin.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("Bootstrap(RecoverEtcd): %v", err)
	}

	if target.Revision() != 42 || len(target.Members()) != 1 || target.Members()[0].Hostname != restored.opts.Hostname {
		t.Fatalf("restored cluster: revision %d, members %+v", target.Revision(), target.Members())
	}

	roundTrip, err := snapshot(ctx, restoredAdmin)
	if err != nil {
		t.Fatalf("EtcdSnapshot after recovery: %v", err)
	}

	if !bytes.Equal(roundTrip, first) {
		t.Fatal("the restored cluster's snapshot differs from the uploaded one")
	}

	// The upload was consumed; a corrupt one can still be forced in with RecoverSkipHashCheck.
	skipped := &EtcdCluster{SnapshotSize: size}
	_, skipAdmin := installedNode(t, cl, Options{Etcd: skipped})

	if _, err = skipAdmin.EtcdRecover(ctx, bytes.NewReader(corrupt)); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	if err = skipAdmin.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: true}); err != nil {
		t.Fatalf("Bootstrap(RecoverSkipHashCheck): %v", err)
	}

	if skipped.Revision() != 42 {
		t.Fatalf("revision after skip-hash recovery = %d", skipped.Revision())
	}
}

func TestEtcdRecoverNeedsRunningNode(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n := appliedNode(t, ctx, Options{InstallDelay: testTimeout * 10}, cl.cp, PhaseInstalling)

	admin := adminClient(t, n, cl)

	_, err := admin.EtcdRecover(ctx, bytes.NewReader([]byte("x")))
	wantCode(t, err, codes.FailedPrecondition, "etcd service is not ready for recovery yet")

	wantCode(t, admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}), codes.FailedPrecondition, "bootstrap is not available yet")
}
