package operation

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// The etcd-restore against the fixture's cluster: a backup on a volume
// target, nodes whose etcd leaves, is wiped, recovered and joined as
// Talos's does (callDialer), and a kube-apiserver that serves the
// snapshot's data a while after the recovery.

// The snapshot every restore fixture restores: kube-system last written
// at revision 3 of 4.
var snapshotWrites = []string{restoreMarkerKey, "/registry/a", restoreMarkerKey, "/registry/b"}

const (
	snapshotRevision    = 4
	snapshotKeyRevision = 3
)

// etcdSnapshot is an etcd backend as a snapshot file holds it: a key
// bucket with the writes at revisions 1...
func etcdSnapshot(t *testing.T, writes ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i, key := range writes {
			rev := int64(i + 1)
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k, uint64(rev))
			k[8] = '_'
			v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, Value: []byte("v")})
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err = errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var backupTarget = v1alpha1.BackupTarget{Volume: &v1alpha1.VolumeTarget{Path: "backups"}}

// writeBackupFile writes content, encrypted to to, as the etcd snapshot of
// backup name of cluster on the volume target under dir, as the backup
// runner does, and returns its record.
func writeBackupFile(t *testing.T, dir, cluster, name string, content []byte, to age.Recipient, c v1alpha1.BackupCompression) v1alpha1.BackupFile {
	t.Helper()
	ctx := context.Background()
	target, err := store.Open(ctx, &backupTarget, store.Options{VolumeDir: dir, Folder: ns + "/" + cluster + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	file := "etcd.snapshot" + archive.Extension(c)
	w, err := target.NewWriter(ctx, name+"/"+file, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := archive.Write(w, bytes.NewReader(content), []age.Recipient{to}, c)
	if err = errors.Join(err, w.Close()); err != nil {
		t.Fatal(err)
	}
	return v1alpha1.BackupFile{Name: file, Content: v1alpha1.BackupContentEtcdSnapshot, StoredSize: sum.Size, ContentSize: sum.ContentSize, Digest: sum.Digest}
}

// restoreFixture is the fixture with an etcd-restore of its TalosBackup
// "nightly" (zstd, encrypted to identity) started as "restore".
type restoreFixture struct {
	*fixture
	d        *callDialer
	snapshot []byte
	identity *age.X25519Identity
	// lag is how many reconciles after the recovery kube-apiserver still
	// serves the old cluster's data; serving, whether it serves the
	// snapshot's.
	lag     int
	serving bool
}

func newRestoreFixture(t *testing.T, params v1alpha1.EtcdRestoreParameters) *restoreFixture {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, started("restore", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationEtcdRestore, EtcdRestore: &params}))
	rf := &restoreFixture{fixture: f, d: newCallDialer(f), lag: 2}
	f.r.Options.ScratchDir, f.r.Options.BackupVolumeDir = t.TempDir(), t.TempDir()
	for _, name := range f.names {
		if !strings.HasPrefix(name, "cp-") {
			continue
		}
		rf.d.member[name+":50000"] = 0
		var m v1alpha1.TalosMachine
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.MachineConditionConfigApplied, Status: metav1.ConditionTrue,
			Reason: v1alpha1.MachineReasonApplied, LastTransitionTime: metav1.NewTime(now)})
		if err := f.client.Status().Update(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if rf.identity, err = age.GenerateX25519Identity(); err != nil {
		t.Fatal(err)
	}
	rf.snapshot = etcdSnapshot(t, snapshotWrites...)
	rf.addBackup("nightly", "demo", rf.snapshot, rf.identity.Recipient())
	rf.addIdentity("restore-identity", rf.identity.String())

	// kube-apiserver serves the old cluster's data until it serves the
	// snapshot's: kube-system at its last write, the store at its revision.
	f.kube.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != restoreMarkerNamespace {
			return false, nil, nil
		}
		rv := "900"
		if rf.serving {
			rv = strconv.Itoa(snapshotKeyRevision)
		}
		return true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restoreMarkerNamespace, ResourceVersion: rv}}, nil
	})
	f.kube.PrependReactor("list", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		rv := "1000"
		if rf.serving {
			rv = strconv.Itoa(snapshotRevision + 1)
		}
		return true, &corev1.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: rv},
			Items: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: restoreMarkerNamespace}}}}, nil
	})
	f.react = rf.react
	return rf
}

// addBackup records a succeeded backup of cluster named name whose etcd
// snapshot is content, encrypted to to.
func (rf *restoreFixture) addBackup(name, cluster string, content []byte, to age.Recipient) *v1alpha1.TalosBackup {
	rf.t.Helper()
	file := writeBackupFile(rf.t, rf.r.Options.BackupVolumeDir, cluster, name, content, to, v1alpha1.BackupCompressionZstd)
	completed := metav1.NewMicroTime(now.Add(-24 * time.Hour))
	b := &v1alpha1.TalosBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TalosBackupSpec{ClusterName: cluster},
		Status: v1alpha1.TalosBackupStatus{Phase: v1alpha1.BackupSucceeded, CompletedAt: &completed, Target: backupTarget.DeepCopy(),
			Recipients: []string{to.(*age.X25519Recipient).String()}, Compression: v1alpha1.BackupCompressionZstd,
			Files: []v1alpha1.BackupFile{file}},
	}
	if err := rf.client.Create(context.Background(), b); err != nil {
		rf.t.Fatal(err)
	}
	return b
}

func (rf *restoreFixture) addIdentity(name, identity string) {
	rf.t.Helper()
	if err := rf.client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{v1alpha1.IdentitySecretKey: []byte(identity + "\n")}}); err != nil {
		rf.t.Fatal(err)
	}
}

// react plays the rest of the system after each reconcile: a node away
// from its wipe is looked at while the budget must hold it, and comes back
// at the next boot; wiped nodes join the etcd that runs; kube-apiserver
// serves the recovered data lag reconciles after the recovery.
func (rf *restoreFixture) react() {
	rf.t.Helper()
	for address, n := range rf.d.Nodes {
		if n.Stage == "running" {
			continue
		}
		if d := rf.cluster().Status.Disruption; d == nil || d.Machine != machineAt(address) || d.Operation != "restore" {
			rf.t.Errorf("%s is away (%s), but the budget is held by %+v", machineAt(address), n.Stage, d)
		}
		n.NeverBoots = false
	}
	rf.d.join()
	if rf.d.epoch == 0 || rf.serving {
		return
	}
	if rf.lag > 0 {
		rf.lag--
		for _, s := range rf.get("restore").Status.Steps {
			if s.Action == v1alpha1.ActionRecoverEtcd && s.Phase != v1alpha1.OperationRunning {
				rf.t.Errorf("the recovery is %s before kube-apiserver served the snapshot's data: %s", s.Phase, s.Message)
			}
		}
		return
	}
	rf.serving = true
}

func stepNamesOf(op *v1alpha1.TalosOperation) []string {
	var out []string
	for _, s := range op.Status.Steps {
		out = append(out, s.Name())
	}
	return out
}

// restoreOrder is the steps of a restore of the fixture's cluster.
var restoreOrder = []string{
	"cp-2 leave-etcd", "cp-3 leave-etcd",
	"cp-1 wipe-etcd", "cp-2 wipe-etcd", "cp-3 wipe-etcd",
	"cp-1 recover-etcd",
	"cp-2 join-etcd", "cp-3 join-etcd",
	"worker-1 restart-kubelet",
}

// restoreCalls are the calls that change the nodes, in order.
var restoreCalls = []string{
	"cp-2 etcd-leave", "cp-3 etcd-leave",
	"cp-1 wipe-etcd", "cp-2 wipe-etcd", "cp-3 wipe-etcd",
	"cp-1 etcd-recover", "cp-1 bootstrap-recover",
	"worker-1 restart kubelet",
}

// TestEtcdRestoreSurvivesACrashAtEveryWrite: whichever status write is
// lost, an etcd-restore takes every control plane but the first out of
// etcd, wipes the first and then the others, recovers the snapshot on the
// first, waits for kube-apiserver to serve it, has the others join and
// restarts the workers' kubelets: each destructive call once, in that
// order, one node away at a time under the budget, every control plane a
// member of the recovered etcd at the end.
func TestEtcdRestoreSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
			rf.failWrite = fail
			op := rf.run("restore")
			if fail == 0 {
				total = rf.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := stepNamesOf(op); !slices.Equal(got, restoreOrder) {
				t.Errorf("steps %v,\nwant %v", got, restoreOrder)
			}
			want := restoreCalls
			if fail > 0 && fail == total {
				// The last write records the kubelet's restart: lost, the
				// restart is asked again, as restartKubelet allows.
				want = append(slices.Clone(restoreCalls), "worker-1 restart kubelet")
			}
			if !slices.Equal(rf.d.log, want) {
				t.Errorf("calls %v,\nwant %v", rf.d.log, want)
			}
			if !bytes.Equal(rf.d.uploaded, rf.snapshot) {
				t.Errorf("the recovery got %d bytes, not the snapshot's %d", len(rf.d.uploaded), len(rf.snapshot))
			}
			for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
				if n := rf.node(name); !n.Etcd || rf.d.member[name+":50000"] != 1 || n.Stage != "running" {
					t.Errorf("%s: etcd %v, a member of etcd %d, stage %s", name, n.Etcd, rf.d.member[name+":50000"], n.Stage)
				}
			}
			if rf.mostAway != 1 {
				t.Errorf("%d nodes away at once", rf.mostAway)
			}
			if !rf.budgetFree() {
				t.Error("the budget is still held")
			}
			if _, err := os.Stat(rf.r.restorePath(op)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the verified snapshot is left in the scratch directory: %v", err)
			}
			if !meta.IsStatusConditionTrue(op.Status.Conditions, v1alpha1.OperationConditionSucceeded) || len(op.Finalizers) != 0 {
				t.Errorf("conditions %+v, finalizers %v", op.Status.Conditions, op.Finalizers)
			}
		})
	}
	// Start, each step's begin, the waits for the wipes and for
	// kube-apiserver, the end.
	if total < len(restoreOrder)+2 {
		t.Fatalf("%d status writes, want at least %d: the crash points were not all exercised", total, len(restoreOrder)+2)
	}
}

// TestEtcdRestoreRefusals: a restore of a backup it cannot restore fails
// before any step, saying why, with every node untouched and nothing kept
// in the scratch directory.
func TestEtcdRestoreRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters
		want  string
	}{
		{"no such backup", func(*restoreFixture) v1alpha1.EtcdRestoreParameters {
			return v1alpha1.EtcdRestoreParameters{Backup: "missing", IdentitySecret: "restore-identity"}
		}, "spec.etcdRestore.backup: TalosBackup missing does not exist in namespace ns"},
		{"a backup of another cluster", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			rf.addBackup("others", "other", rf.snapshot, rf.identity.Recipient())
			return v1alpha1.EtcdRestoreParameters{Backup: "others", IdentitySecret: "restore-identity"}
		}, "TalosBackup others is a backup of TalosCluster other, not of demo"},
		{"a backup that failed", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			b := rf.addBackup("failed", "demo", rf.snapshot, rf.identity.Recipient())
			b.Status.Phase = v1alpha1.BackupFailed
			if err := rf.client.Update(context.Background(), b); err != nil {
				rf.t.Fatal(err)
			}
			return v1alpha1.EtcdRestoreParameters{Backup: "failed", IdentitySecret: "restore-identity"}
		}, "TalosBackup failed did not succeed"},
		{"an identity of no recipient", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			other, err := age.GenerateX25519Identity()
			if err != nil {
				rf.t.Fatal(err)
			}
			rf.addIdentity("other-identity", other.String())
			return v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "other-identity"}
		}, "matches none of the recipients TalosBackup nightly was encrypted to"},
		{"no identity Secret", func(*restoreFixture) v1alpha1.EtcdRestoreParameters {
			return v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "missing"}
		}, "spec.etcdRestore.identitySecret: Secret missing does not exist"},
		{"a corrupt snapshot", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			b := rf.addBackup("corrupt", "demo", rf.snapshot, rf.identity.Recipient())
			b.Status.Files[0].Digest = "sha256:" + strings.Repeat("0", 64)
			if err := rf.client.Update(context.Background(), b); err != nil {
				rf.t.Fatal(err)
			}
			return v1alpha1.EtcdRestoreParameters{Backup: "corrupt", IdentitySecret: "restore-identity"}
		}, "the etcd snapshot of TalosBackup corrupt is corrupt"},
		// Refused once fetched and decrypted: what was fetched is removed.
		{"a snapshot of no Kubernetes cluster", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			rf.addBackup("foreign", "demo", etcdSnapshot(rf.t, "/a", "/b"), rf.identity.Recipient())
			return v1alpha1.EtcdRestoreParameters{Backup: "foreign", IdentitySecret: "restore-identity"}
		}, "the etcd snapshot of TalosBackup foreign holds no kube-system Namespace: it is not a Kubernetes cluster's etcd"},
		{"a snapshot that does not open", func(rf *restoreFixture) v1alpha1.EtcdRestoreParameters {
			rf.addBackup("garbage", "demo", []byte("not an etcd backend"), rf.identity.Recipient())
			return v1alpha1.EtcdRestoreParameters{Backup: "garbage", IdentitySecret: "restore-identity"}
		}, "the etcd snapshot of TalosBackup garbage cannot be restored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
			params := tc.setup(rf)
			op := rf.get("restore")
			op.Spec.EtcdRestore = &params
			if err := rf.client.Update(context.Background(), op); err != nil {
				t.Fatal(err)
			}
			op = rf.run("restore")
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
			if op.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
				!strings.Contains(c.Message, tc.want) || len(op.Status.Steps) != 0 {
				t.Fatalf("ended %s, condition %+v, steps %v; want PrecheckFailed saying %q", op.Status.Phase, c, stepNamesOf(op), tc.want)
			}
			if len(rf.d.log) != 0 {
				t.Errorf("calls %v", rf.d.log)
			}
			for _, name := range rf.names {
				if n := rf.node(name); len(n.Calls) != 0 || n.Stage != "running" || n.Etcd != strings.HasPrefix(name, "cp-") {
					t.Errorf("%s: stage %s, etcd %v, calls %v", name, n.Stage, n.Etcd, n.Calls)
				}
			}
			rf.scratchEmpty()
			if len(op.Finalizers) != 0 {
				t.Errorf("finalizers %v", op.Finalizers)
			}
		})
	}
}

// scratchEmpty fails the test unless the scratch directory is empty.
func (rf *restoreFixture) scratchEmpty() {
	rf.t.Helper()
	if left, err := os.ReadDir(rf.r.Options.ScratchDir); err != nil || len(left) != 0 {
		rf.t.Errorf("the scratch directory holds %v (%v)", left, err)
	}
}

// TestEtcdRestoreRefusedAfterTheFetchKeepsNoSnapshot: a restore refused
// once its snapshot was fetched and decrypted (it holds no kube-system
// Namespace) leaves no decrypted snapshot, every Secret of the cluster in
// plain text, in the scratch directory after any reconcile, whichever
// status write is lost.
func TestEtcdRestoreRefusedAfterTheFetchKeepsNoSnapshot(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "foreign", IdentitySecret: "restore-identity"})
			rf.addBackup("foreign", "demo", etcdSnapshot(t, "/a", "/b"), rf.identity.Recipient())
			rf.failWrite = fail
			var op *v1alpha1.TalosOperation
			for range 10 {
				rf.once("restore")
				rf.scratchEmpty()
				if op = rf.get("restore"); op.Status.Phase == v1alpha1.OperationFailed && len(op.Finalizers) == 0 {
					break
				}
			}
			if fail == 0 {
				total = rf.writes
			}
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
			if op.Status.Phase != v1alpha1.OperationFailed || c == nil || !strings.Contains(c.Message, "holds no kube-system Namespace") || len(op.Finalizers) != 0 {
				t.Fatalf("ended %s, condition %+v, finalizers %v", op.Status.Phase, c, op.Finalizers)
			}
		})
	}
	if total == 0 {
		t.Fatal("no status write: the crash points were not exercised")
	}
}

// TestEtcdRestoreDeletedBeforeItRanKeepsNoSnapshot: a restore whose checks
// passed (its snapshot fetched and decrypted) and that waits to run, for
// another operation or for the cluster's health, is deleted: it holds the
// finalizer, and goes only once its snapshot is removed, nothing sent to
// any node.
func TestEtcdRestoreDeletedBeforeItRanKeepsNoSnapshot(t *testing.T) {
	for _, waitsFor := range []string{"another operation", "the cluster's health"} {
		t.Run(waitsFor, func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
			ctx := context.Background()
			wantReason := v1alpha1.OperationReasonWaitingForOperation
			if waitsFor == "another operation" {
				first := started("first", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot})
				first.Status.Phase = v1alpha1.OperationRunning
				if err := rf.client.Create(ctx, first); err != nil {
					t.Fatal(err)
				}
			} else {
				wantReason = v1alpha1.OperationReasonClusterNotHealthy
				m := &v1alpha1.TalosMachine{}
				if err := rf.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "worker-1"}, m); err != nil {
					t.Fatal(err)
				}
				m.Status.Phase = v1alpha1.MachinePhaseUnreachable
				if err := rf.client.Status().Update(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			rf.once("restore")
			op := rf.get("restore")
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
			if op.Status.Phase != v1alpha1.OperationPending || c == nil || c.Reason != wantReason {
				t.Fatalf("the restore is %s (%+v), not waiting for %s", op.Status.Phase, c, waitsFor)
			}
			if _, err := os.Stat(rf.r.restorePath(op)); err != nil {
				t.Fatalf("the checks passed without the snapshot: %v", err)
			}
			if err := rf.client.Delete(ctx, op); err != nil {
				t.Fatal(err)
			}
			rf.once("restore")
			rf.scratchEmpty()
			if err := rf.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "restore"}, op); !apierrors.IsNotFound(err) {
				t.Errorf("the restore is still there (%v): finalizers %v", err, op.Finalizers)
			}
			if len(rf.d.log) != 0 {
				t.Errorf("calls %v", rf.d.log)
			}
		})
	}
}

// TestEtcdRestoreLeavesNoSnapshotAfterACrash: a controller stopped after
// it fetched a restore's snapshot and before the restore was done with it
// left the decrypted snapshot (or part of it) in the scratch directory;
// whatever became of the restore meanwhile, it is removed: by the restore
// refused again, deleted, ended (by an older controller, which fetched
// before it added the finalizer) or gone (swept at the start). The
// snapshot of a restore that still runs stays.
func TestEtcdRestoreLeavesNoSnapshotAfterACrash(t *testing.T) {
	plain := etcdSnapshot(t, "/a", "/b")
	for _, tc := range []struct {
		name string
		// then does to the restore what happened while the controller was
		// stopped, and runs the controller.
		then func(rf *restoreFixture, op *v1alpha1.TalosOperation)
	}{
		{"refused again", func(rf *restoreFixture, op *v1alpha1.TalosOperation) {
			if op := rf.run("restore"); op.Status.Phase != v1alpha1.OperationFailed {
				rf.t.Fatalf("ended %s", op.Status.Phase)
			}
		}},
		{"deleted", func(rf *restoreFixture, op *v1alpha1.TalosOperation) {
			if err := rf.client.Delete(context.Background(), op); err != nil {
				rf.t.Fatal(err)
			}
			rf.once("restore")
		}},
		{"ended by an older controller", func(rf *restoreFixture, op *v1alpha1.TalosOperation) {
			controllerutil.RemoveFinalizer(op, Finalizer)
			if err := rf.client.Update(context.Background(), op); err != nil {
				rf.t.Fatal(err)
			}
			op.Status.Phase = v1alpha1.OperationFailed
			if err := rf.client.Status().Update(context.Background(), op); err != nil {
				rf.t.Fatal(err)
			}
			rf.once("restore")
		}},
		{"gone", func(rf *restoreFixture, op *v1alpha1.TalosOperation) {
			controllerutil.RemoveFinalizer(op, Finalizer)
			if err := rf.client.Update(context.Background(), op); err != nil {
				rf.t.Fatal(err)
			}
			if err := rf.client.Delete(context.Background(), op); err != nil {
				rf.t.Fatal(err)
			}
			if err := rf.r.sweepScratch(context.Background()); err != nil {
				rf.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "foreign", IdentitySecret: "restore-identity"})
			rf.addBackup("foreign", "demo", plain, rf.identity.Recipient())
			ctx := context.Background()
			// The restore as the controller left it: Pending, holding the
			// finalizer it added before the fetch, its snapshot fetched
			// and decrypted (and the part of a fetch that was cut short, as
			// atomicfile and an older controller name it).
			op := rf.get("restore")
			controllerutil.AddFinalizer(op, Finalizer)
			if err := rf.client.Update(ctx, op); err != nil {
				t.Fatal(err)
			}
			path := rf.r.restorePath(op)
			for _, p := range []string{path, path + ".partial", filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".12345")} {
				if err := os.WriteFile(p, plain, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// Another restore, of another cluster, that runs: its snapshot stays.
			running := started("running", v1alpha1.TalosOperationSpec{ClusterName: "other", Type: v1alpha1.OperationEtcdRestore,
				EtcdRestore: &v1alpha1.EtcdRestoreParameters{Backup: "b", IdentitySecret: "s"}})
			running.Status.Phase = v1alpha1.OperationRunning
			if err := rf.client.Create(ctx, running); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(rf.r.restorePath(running), plain, 0o600); err != nil {
				t.Fatal(err)
			}
			tc.then(rf, rf.get("restore"))
			left, err := os.ReadDir(rf.r.Options.ScratchDir)
			if err != nil || len(left) != 1 || left[0].Name() != filepath.Base(rf.r.restorePath(running)) {
				t.Errorf("the scratch directory holds %v (%v), want the running restore's snapshot only", left, err)
			}
			if len(rf.d.log) != 0 {
				t.Errorf("calls %v", rf.d.log)
			}
		})
	}
}

// TestEtcdRestoreChecksEveryNodeFirst: a node answering at any target's
// address with another system UUID refuses the restore before its first
// step, the first control plane's as much as a worker's: nothing is sent
// to any node (an impostor at cp-1, found only at its wipe, would have
// found cp-2 and cp-3 out of etcd already), and nothing is fetched.
func TestEtcdRestoreChecksEveryNodeFirst(t *testing.T) {
	for _, machine := range []string{"cp-1", "cp-3", "worker-1"} {
		t.Run(machine, func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
			real := rf.node(machine)
			impostor := &talostest.Node{UUID: "impostor", Installed: true, Stage: "running", Etcd: real.Etcd, Config: real.Config}
			rf.dialer.Nodes[machine+":50000"] = impostor
			op := rf.run("restore")
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
			want := "TalosMachine " + machine + ": the node answering at " + machine + ":50000 has system UUID impostor, not " + machine
			if op.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
				!strings.Contains(c.Message, want) || len(op.Status.Steps) != 0 {
				t.Fatalf("ended %s, condition %+v, steps %v; want PrecheckFailed saying %q", op.Status.Phase, c, stepNamesOf(op), want)
			}
			if len(rf.d.log) != 0 || len(impostor.Calls) != 0 {
				t.Errorf("calls %v; the impostor was asked %v", rf.d.log, impostor.Calls)
			}
			for _, name := range rf.names {
				if n := rf.node(name); len(n.Calls) != 0 || n.Stage != "running" || n.Etcd != strings.HasPrefix(name, "cp-") {
					t.Errorf("%s: stage %s, etcd %v, calls %v", name, n.Stage, n.Etcd, n.Calls)
				}
			}
			rf.scratchEmpty()
			if !rf.budgetFree() || len(op.Finalizers) != 0 {
				t.Errorf("budget free %v, finalizers %v", rf.budgetFree(), op.Finalizers)
			}
		})
	}
}

// TestEtcdRestoreWaitsForEveryControlPlane: a restore waits to start while
// a control plane's node does not answer, every node untouched and
// nothing fetched, and runs once it answers; a worker's node that does not
// answer does not hold it back (its step at the end checks it).
func TestEtcdRestoreWaitsForEveryControlPlane(t *testing.T) {
	rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
	cp3 := rf.node("cp-3")
	delete(rf.dialer.Nodes, "cp-3:50000") // dialing it is refused
	for range 5 {
		rf.once("restore")
	}
	op := rf.get("restore")
	c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
	if op.Status.Phase != v1alpha1.OperationPending || c == nil || c.Reason != v1alpha1.OperationReasonClusterNotHealthy ||
		!strings.Contains(c.Message, "waiting for the nodes of control planes cp-3 (dial cp-3:50000: connection refused) to answer") {
		t.Fatalf("the restore is %s, Progressing %+v", op.Status.Phase, c)
	}
	if len(rf.d.log) != 0 {
		t.Errorf("calls %v", rf.d.log)
	}
	rf.scratchEmpty()
	rf.dialer.Nodes["cp-3:50000"] = cp3
	if op := rf.run("restore"); op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("once cp-3 answered: ended %s: %+v", op.Status.Phase, op.Status)
	}

	rf = newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
	worker := rf.node("worker-1")
	worker.Stage = "off" // its Talos API does not answer
	rf.fixture.react = func() {
		delete(rf.dialer.Nodes, "worker-1:50000") // off, not away: no budget is its
		rf.react()
		rf.dialer.Nodes["worker-1:50000"] = worker
	}
	op = rf.run("restore")
	if i := slices.IndexFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool { return s.Phase == v1alpha1.OperationFailed }); op.Status.Phase != v1alpha1.OperationFailed ||
		i < 0 || op.Status.Steps[i].Name() != "worker-1 restart-kubelet" {
		t.Fatalf("with worker-1 silent: ended %s, steps %+v", op.Status.Phase, op.Status.Steps)
	}
	if want := restoreCalls[:len(restoreCalls)-1]; !slices.Equal(rf.d.log, want) {
		t.Errorf("calls %v,\nwant %v", rf.d.log, want)
	}
}

// TestEtcdRestoreChecksEachNode: a node that answers at a machine's
// address with another system UUID once the restore started (its start
// checked every node) fails that machine's step before anything is sent
// to it, whichever step it is (leave, wipe, kubelet restart), and the
// operation stops there, the budget given back.
func TestEtcdRestoreChecksEachNode(t *testing.T) {
	for _, tc := range []struct{ machine, step string }{
		{"cp-2", "cp-2 leave-etcd"}, {"cp-1", "cp-1 wipe-etcd"}, {"worker-1", "worker-1 restart-kubelet"},
	} {
		t.Run(tc.step, func(t *testing.T) {
			rf := newRestoreFixture(t, v1alpha1.EtcdRestoreParameters{Backup: "nightly", IdentitySecret: "restore-identity"})
			rf.once("restore")
			if op := rf.get("restore"); op.Status.Phase != v1alpha1.OperationRunning || slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
				return s.Phase != v1alpha1.OperationPending
			}) {
				t.Fatalf("after its start: %s, steps %+v", op.Status.Phase, op.Status.Steps)
			}
			real := rf.node(tc.machine)
			impostor := &talostest.Node{UUID: "impostor", Installed: true, Stage: "running", Etcd: real.Etcd, Config: real.Config}
			rf.dialer.Nodes[tc.machine+":50000"] = impostor
			op := rf.run("restore")
			var failed *v1alpha1.OperationStep
			for i, s := range op.Status.Steps {
				if s.Phase == v1alpha1.OperationFailed {
					failed = &op.Status.Steps[i]
				}
			}
			if op.Status.Phase != v1alpha1.OperationFailed || failed == nil || failed.Name() != tc.step ||
				!strings.Contains(failed.Message, "has system UUID impostor, not "+tc.machine) {
				t.Fatalf("ended %s, failed step %+v", op.Status.Phase, failed)
			}
			if len(impostor.Calls) != 0 || len(rf.d.calls(tc.machine)) != 0 {
				t.Errorf("the impostor was asked %v (%v)", impostor.Calls, rf.d.calls(tc.machine))
			}
			i := slices.Index(restoreOrder, tc.step)
			for _, s := range op.Status.Steps[i+1:] {
				if s.Phase != v1alpha1.OperationPending {
					t.Errorf("step %s after the failed one: %s", s.Name(), s.Phase)
				}
			}
			if !rf.budgetFree() {
				t.Error("the budget is still held")
			}
		})
	}
}
