package backup

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// The runner against a fake client, talostest's nodes (with the etcd
// snapshot talostest leaves out) and a volume target in a temporary
// directory, read back with the recipients' identity.

const rns = "ns"

var (
	bundleOnce sync.Once
	bundleData []byte
	bundleErr  error
)

// runnerFixture is a bootstrapped cluster "demo" of two control planes and
// a worker (and a machine not configured yet), backed up to a volume
// target, and a Pending TalosBackup "nightly" of it.
type runnerFixture struct {
	t        *testing.T
	client   client.Client
	r        *Runner
	dialer   *snapshotDialer
	recorder *eventstest.Recorder
	dir      string
	identity *age.X25519Identity
	// failWrite, when positive, fails that (1-based) write of the backup
	// (its finalizer, its status), as a controller that crashed before it
	// would; writes counts them.
	failWrite, writes int
}

// snapshotDialer is talostest's dialer with etcd snapshots, and the Talos
// roles of the certificate each call was made with.
type snapshotDialer struct {
	*talostest.Dialer
	snapshot []byte
	// failSnapshot are the machines whose etcd snapshot fails.
	failSnapshot map[string]bool
	// roles are "<machine> <call> <roles>", in order.
	roles []string
}

func (d *snapshotDialer) Configured(ctx context.Context, address string, creds talos.Credentials) (talos.Node, error) {
	n, err := d.Dialer.Configured(ctx, address, creds)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(creds.Certificate)
	if block == nil {
		return nil, errors.New("no client certificate")
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	return &snapshotSession{Node: n, d: d, machine: strings.TrimSuffix(address, ":50000"), roles: strings.Join(crt.Subject.Organization, ",")}, nil
}

type snapshotSession struct {
	talos.Node
	d       *snapshotDialer
	machine string
	roles   string
}

func (s *snapshotSession) EtcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	s.d.roles = append(s.d.roles, s.machine+" etcd-snapshot "+s.roles)
	if _, err := s.Node.Status(ctx); err != nil {
		return nil, err
	}
	if s.d.failSnapshot[s.machine] {
		return nil, errors.New("etcd: no leader")
	}
	return io.NopCloser(bytes.NewReader(s.d.snapshot)), nil
}

func (s *snapshotSession) Config(ctx context.Context) ([]byte, error) {
	s.d.roles = append(s.d.roles, s.machine+" config "+s.roles)
	return s.Node.Config(ctx)
}

func newRunnerFixture(t *testing.T) *runnerFixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	bundleOnce.Do(func() { bundleData, bundleErr = secretsbundle.Generate("v1.13.0", t0) })
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
	f := &runnerFixture{t: t, dir: t.TempDir(), recorder: eventstest.New(t, 100)}
	var err error
	if f.identity, err = age.GenerateX25519Identity(); err != nil {
		t.Fatal(err)
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: rns, UID: "uid-demo"},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
			Backup: &v1alpha1.ClusterBackup{Schedule: "@daily", Target: v1alpha1.BackupTarget{Volume: &v1alpha1.VolumeTarget{Path: "backups"}},
				Encryption: v1alpha1.BackupEncryption{Recipients: []string{f.identity.Recipient().String()}}, Compression: v1alpha1.BackupCompressionZstd}},
		Status: v1alpha1.TalosClusterStatus{SecretsDigest: secretsbundle.Digest(bundleData), Conditions: []metav1.Condition{{
			Type: v1alpha1.ClusterConditionBootstrapped, Status: metav1.ConditionTrue, Reason: v1alpha1.ClusterReasonBootstrapped, LastTransitionTime: metav1.NewTime(t0)}}},
	}
	objs := []client.Object{cluster,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: rns},
			Data: map[string][]byte{secretsbundle.BundleKey: bundleData}},
		&v1alpha1.TalosBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: rns, CreationTimestamp: metav1.NewTime(t0)},
			Spec: v1alpha1.TalosBackupSpec{ClusterName: "demo"}, Status: v1alpha1.TalosBackupStatus{Phase: v1alpha1.BackupPending}},
	}
	f.dialer = &snapshotDialer{Dialer: &talostest.Dialer{Nodes: map[string]*talostest.Node{}}, snapshot: []byte("the etcd snapshot of demo"),
		failSnapshot: map[string]bool{}}
	for _, m := range []struct {
		name       string
		role       v1alpha1.MachineRole
		configured bool
	}{{"cp-2", v1alpha1.MachineRoleControlPlane, true}, {"cp-1", v1alpha1.MachineRoleControlPlane, true},
		{"worker-1", v1alpha1.MachineRoleWorker, true}, {"worker-new", v1alpha1.MachineRoleWorker, false}} {
		machine := &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: rns},
			Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: m.role, Address: m.name + ":50000"},
			Status: v1alpha1.TalosMachineStatus{Phase: v1alpha1.MachinePhaseReady,
				Approval: &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "olivia"}},
		}
		if m.configured {
			machine.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "h", AppliedAt: metav1.NewTime(t0)}
		}
		objs = append(objs, machine)
		f.dialer.Nodes[m.name+":50000"] = &talostest.Node{UUID: m.name, Installed: m.configured, Stage: "running",
			Config: []byte("version: v1alpha1\n# the config of " + m.name + "\n")}
	}
	index := func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }
	failable := func() error {
		f.writes++
		if f.writes == f.failWrite {
			return errors.New("injected: the controller stopped before this write")
		}
		return nil
	}
	f.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}, &v1alpha1.TalosBackup{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, index).
		WithIndex(&v1alpha1.TalosBackup{}, clusterindex.Field, index).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if _, ok := obj.(*v1alpha1.TalosBackup); ok {
					if err := failable(); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			// The fake serves no finalizers subresource: write them through the object.
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*v1alpha1.TalosBackup); ok {
					if err := failable(); err != nil {
						return err
					}
				}
				if sub == "finalizers" {
					return c.Patch(ctx, obj, patch)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	f.r = &Runner{Client: f.client, APIReader: f.client, Secrets: f.client, Dialer: f.dialer, Recorder: f.recorder,
		Options: Options{VolumeDir: f.dir}.withDefaults(), Now: func() time.Time { return t0 }}
	return f
}

func (f *runnerFixture) reconcile(name string) error {
	f.t.Helper()
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: rns, Name: name}})
	return err
}

// runUntilDone reconciles the backup until it ends, as the controller
// does after a failed reconcile, and returns it.
func (f *runnerFixture) runUntilDone(name string) *v1alpha1.TalosBackup {
	f.t.Helper()
	for range 10 {
		if err := f.reconcile(name); err != nil && !strings.Contains(err.Error(), "injected") {
			f.t.Fatalf("reconcile: %v", err)
		}
		b := f.backup(name)
		if b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed {
			return b
		}
	}
	f.t.Fatalf("backup %s did not end: %+v", name, f.backup(name).Status)
	return nil
}

func (f *runnerFixture) backup(name string) *v1alpha1.TalosBackup {
	f.t.Helper()
	var b v1alpha1.TalosBackup
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: rns, Name: name}, &b); err != nil {
		f.t.Fatal(err)
	}
	return &b
}

// folder is where the files of backup name are on the volume.
func (f *runnerFixture) folder(name string) string {
	return filepath.Join(f.dir, "backups", rns, "demo", name)
}

// files lists the files under the backup's folder, relative to it.
func (f *runnerFixture) files(name string) []string {
	f.t.Helper()
	var out []string
	err := filepath.WalkDir(f.folder(name), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(f.folder(name), path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// read decrypts a file of the backup with the recipients' identity,
// checking the digest its record has.
func (f *runnerFixture) read(name string, file v1alpha1.BackupFile) []byte {
	f.t.Helper()
	src, err := os.Open(filepath.Join(f.folder(name), filepath.FromSlash(file.Name)))
	if err != nil {
		f.t.Fatal(err)
	}
	defer src.Close()
	var out bytes.Buffer
	if _, err := archive.Read(&out, src, []age.Identity{f.identity}, v1alpha1.BackupCompressionZstd, file.Digest); err != nil {
		f.t.Fatalf("read %s: %v", file.Name, err)
	}
	return out.Bytes()
}

// events are the recorded Events, "Type Reason note".
func (f *runnerFixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

var wantFiles = []string{"backup.json", "etcd.snapshot.zst.age", "machines/cp-1.yaml.zst.age", "machines/cp-2.yaml.zst.age", "machines/worker-1.yaml.zst.age"}

// checkSucceeded checks that backup name holds the snapshot and every
// configured machine's running config, as its record and manifest say.
func (f *runnerFixture) checkSucceeded(name string) {
	f.t.Helper()
	b := f.backup(name)
	if b.Status.Phase != v1alpha1.BackupSucceeded || !meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.BackupConditionSucceeded) {
		f.t.Fatalf("ended %s: %+v", b.Status.Phase, b.Status.Conditions)
	}
	if got := f.files(name); !slices.Equal(got, wantFiles) {
		f.t.Errorf("files %v, want %v", got, wantFiles)
	}
	if want := "file://" + filepath.ToSlash(f.dir) + "/backups/ns/demo/" + name + "/"; b.Status.Location != want {
		f.t.Errorf("location %s, want %s", b.Status.Location, want)
	}
	var stored int64
	var names []string
	for _, file := range b.Status.Files {
		names = append(names, file.Name)
		stored += file.StoredSize
		content := f.read(name, file)
		switch file.Content {
		case v1alpha1.BackupContentEtcdSnapshot:
			if !bytes.Equal(content, f.dialer.snapshot) || file.Machine != "cp-1" {
				f.t.Errorf("the snapshot of %s: %q", file.Machine, content)
			}
		case v1alpha1.BackupContentMachineConfig:
			if want := f.dialer.Nodes[file.Machine+":50000"].Config; !bytes.Equal(content, want) || file.Name != "machines/"+file.Machine+".yaml.zst.age" {
				f.t.Errorf("%s holds %q, want %s's config", file.Name, content, file.Machine)
			}
		}
		if file.ContentSize != int64(len(content)) {
			f.t.Errorf("%s: content size %d, read %d", file.Name, file.ContentSize, len(content))
		}
	}
	if !slices.Equal(names, wantFiles[1:]) || b.Status.StoredSize != stored {
		f.t.Errorf("recorded files %v, stored size %d (sum %d)", names, b.Status.StoredSize, stored)
	}
	data, err := os.ReadFile(filepath.Join(f.folder(name), ManifestFile))
	if err != nil {
		f.t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		f.t.Fatal(err)
	}
	if m.Backup != name || m.Cluster != "demo" || len(m.Files) != len(b.Status.Files) || m.Recipients[0] != f.identity.Recipient().String() {
		f.t.Errorf("manifest %+v", m)
	}
	if !slices.Contains(b.Finalizers, Finalizer) {
		f.t.Errorf("finalizers %v", b.Finalizers)
	}
}

// TestBackupWritesEverything: a backup writes the etcd snapshot, taken
// with an os:etcd:backup certificate from a Ready control plane, and the
// running config of every configured machine, read as os:admin, each
// encrypted to the recipients, and a manifest; its record lists them.
func TestBackupWritesEverything(t *testing.T) {
	f := newRunnerFixture(t)
	if err := f.reconcile("nightly"); err != nil {
		t.Fatal(err)
	}
	f.checkSucceeded("nightly")
	want := []string{"cp-1 etcd-snapshot os:etcd:backup", "cp-1 config os:admin", "cp-2 config os:admin", "worker-1 config os:admin"}
	if !slices.Equal(f.dialer.roles, want) {
		t.Errorf("calls %v,\nwant %v", f.dialer.roles, want)
	}
	if ev := f.events(); !hasEvent(ev, "Normal BackupStarted") || !hasEvent(ev, "Normal BackupSucceeded 4 files") {
		t.Errorf("events %v", ev)
	}
	// Done: it is not run again.
	f.dialer.roles = nil
	if err := f.reconcile("nightly"); err != nil || len(f.dialer.roles) != 0 {
		t.Errorf("a succeeded backup reconciled again: %v, calls %v", err, f.dialer.roles)
	}
}

// TestBackupSnapshotFromTheNextControlPlane: a control plane that gives
// no snapshot is passed over for the next; none giving one fails the
// backup saying why each did not.
func TestBackupSnapshotFromTheNextControlPlane(t *testing.T) {
	f := newRunnerFixture(t)
	f.dialer.failSnapshot["cp-1"] = true
	b := f.runUntilDone("nightly")
	if b.Status.Phase != v1alpha1.BackupSucceeded || b.Status.Files[0].Content != v1alpha1.BackupContentEtcdSnapshot || b.Status.Files[0].Machine != "cp-2" {
		t.Fatalf("ended %s, files %+v", b.Status.Phase, b.Status.Files)
	}

	f = newRunnerFixture(t)
	f.dialer.failSnapshot["cp-1"], f.dialer.failSnapshot["cp-2"] = true, true
	b = f.runUntilDone("nightly")
	c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded)
	if b.Status.Phase != v1alpha1.BackupFailed || c == nil || c.Reason != v1alpha1.BackupReasonSnapshotFailed ||
		c.Message != "no control plane gave an etcd snapshot: cp-1: etcd: no leader; cp-2: etcd: no leader" {
		t.Fatalf("ended %s: %+v", b.Status.Phase, c)
	}
	if got := f.files("nightly"); len(got) != 0 {
		t.Errorf("files left: %v", got)
	}
}

// TestBackupFailsMidWay: a machine whose config cannot be read after the
// snapshot and other configs were written fails the backup: Failed with a
// reason and a message naming the machine, no files recorded, no target
// (nothing left on it: the folder is deleted), Warning Events on the
// backup and its cluster.
func TestBackupFailsMidWay(t *testing.T) {
	f := newRunnerFixture(t)
	f.dialer.Nodes["worker-1:50000"].Stage = "off"
	b := f.runUntilDone("nightly")
	c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded)
	if b.Status.Phase != v1alpha1.BackupFailed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.BackupReasonMachineConfigFailed ||
		!strings.HasPrefix(c.Message, "the running config of worker-1: ") || !strings.Contains(c.Message, "connection refused") {
		t.Fatalf("ended %s: %+v", b.Status.Phase, c)
	}
	if len(b.Status.Files) != 0 || b.Status.StoredSize != 0 || b.Status.Target != nil || b.Status.Location != "" || b.Status.CompletedAt == nil {
		t.Errorf("a failed backup's record: %+v", b.Status)
	}
	if got := f.files("nightly"); len(got) != 0 {
		t.Errorf("files left on the target: %v", got)
	}
	if _, err := os.Stat(f.folder("nightly")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the folder is left: %v", err)
	}
	ev := f.events()
	if !hasEvent(ev, "Warning BackupFailed the running config of worker-1") || !hasEvent(ev, "Warning BackupFailed TalosBackup nightly failed: the running config of worker-1") {
		t.Errorf("events %v", ev)
	}
	// Failed: not run again.
	f.dialer.roles = nil
	if err := f.reconcile("nightly"); err != nil || len(f.dialer.roles) != 0 {
		t.Errorf("a failed backup reconciled again: %v, calls %v", err, f.dialer.roles)
	}
}

// TestBackupSurvivesACrashAtEveryWrite: whichever write of the backup is
// lost (its finalizer, Running, Succeeded), it is run again from the start
// and ends Succeeded with exactly its files, written over.
func TestBackupSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newRunnerFixture(t)
			f.failWrite = fail
			f.runUntilDone("nightly")
			if fail == 0 {
				total = f.writes
			}
			f.checkSucceeded("nightly")
			snapshots := 0
			for _, c := range f.dialer.roles {
				if strings.Contains(c, "etcd-snapshot") {
					snapshots++
				}
			}
			want := 1
			if fail > 0 && fail == total {
				want = 2 // the run whose Succeeded was lost, and the one after
			}
			if snapshots != want {
				t.Errorf("%d snapshots taken, want %d", snapshots, want)
			}
		})
	}
	// The finalizer, Running, Succeeded.
	if total != 3 {
		t.Fatalf("%d writes, want 3: the crash points were not all exercised", total)
	}

	// A run cut short half-way through its snapshot: Running, with part
	// of a file on the target.
	t.Run("a run cut short", func(t *testing.T) {
		f := newRunnerFixture(t)
		b := f.backup("nightly")
		started := metav1.NewMicroTime(t0)
		b.Finalizers = []string{Finalizer}
		if err := f.client.Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		b.Status.Phase, b.Status.StartedAt, b.Status.Compression = v1alpha1.BackupRunning, &started, v1alpha1.BackupCompressionZstd
		b.Status.Target = &v1alpha1.BackupTarget{Volume: &v1alpha1.VolumeTarget{Path: "backups"}}
		b.Status.Recipients = []string{f.identity.Recipient().String()}
		if err := f.client.Status().Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(f.folder("nightly"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.folder("nightly"), "etcd.snapshot.zst.age"), []byte("age-encryption.org/v1\n-> X25519 cut"), 0o600); err != nil {
			t.Fatal(err)
		}
		f.runUntilDone("nightly")
		f.checkSucceeded("nightly")
	})
}

// TestBackupFilesGoWithTheRecord: deleting a backup deletes its files and
// its folder (BackupFilesDeleted), unless an admin annotated it
// keep-files (BackupFilesKept: they stay); then the record goes.
func TestBackupFilesGoWithTheRecord(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep-files %v", keep), func(t *testing.T) {
			f := newRunnerFixture(t)
			f.checkSucceededAfterRun()
			ctx := context.Background()
			b := f.backup("nightly")
			if keep {
				b.Annotations = map[string]string{v1alpha1.AnnotationKeepFiles: "true"}
				if err := f.client.Update(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			f.events()
			if err := f.client.Delete(ctx, b); err != nil {
				t.Fatal(err)
			}
			if err := f.reconcile("nightly"); err != nil {
				t.Fatal(err)
			}
			if err := f.client.Get(ctx, types.NamespacedName{Namespace: rns, Name: "nightly"}, b); err == nil {
				t.Errorf("the record stays: finalizers %v", b.Finalizers)
			}
			ev := f.events()
			if keep {
				if got := f.files("nightly"); !slices.Equal(got, wantFiles) || !hasEvent(ev, "Warning BackupFilesKept") {
					t.Errorf("files %v, events %v", got, ev)
				}
				return
			}
			if _, err := os.Stat(f.folder("nightly")); !errors.Is(err, fs.ErrNotExist) || !hasEvent(ev, "Normal BackupFilesDeleted deleted the files at file://") {
				t.Errorf("the folder after the deletion: %v; events %v", err, ev)
			}
			if _, err := os.Stat(filepath.Join(f.dir, "backups")); err != nil {
				t.Errorf("the target's own directory went too: %v", err)
			}
		})
	}
}

func (f *runnerFixture) checkSucceededAfterRun() {
	f.t.Helper()
	f.runUntilDone("nightly")
	f.checkSucceeded("nightly")
}

// TestBackupRefusals: a backup of a cluster without backup settings, or
// not bootstrapped, or of no cluster, fails at once saying so, with
// nothing written.
func TestBackupRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.TalosCluster)
		reason string
		want   string
	}{
		{"no backup settings", func(c *v1alpha1.TalosCluster) { c.Spec.Backup = nil }, v1alpha1.BackupReasonNoBackupSetting,
			"TalosCluster demo has no backup setting"},
		{"not bootstrapped", func(c *v1alpha1.TalosCluster) { c.Status.Conditions = nil }, v1alpha1.BackupReasonNotBootstrapped,
			"TalosCluster demo is not bootstrapped"},
		{"no cluster", func(c *v1alpha1.TalosCluster) { c.Name = "" }, v1alpha1.BackupReasonClusterNotFound,
			"TalosCluster demo does not exist in namespace ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRunnerFixture(t)
			ctx := context.Background()
			var c v1alpha1.TalosCluster
			if err := f.client.Get(ctx, types.NamespacedName{Namespace: rns, Name: "demo"}, &c); err != nil {
				t.Fatal(err)
			}
			tc.change(&c)
			var err error
			switch {
			case c.Name == "":
				err = f.client.Delete(ctx, &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: rns, Name: "demo"}})
			case c.Spec.Backup == nil:
				err = f.client.Update(ctx, &c)
			default:
				err = f.client.Status().Update(ctx, &c)
			}
			if err != nil {
				t.Fatal(err)
			}
			b := f.runUntilDone("nightly")
			cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded)
			if b.Status.Phase != v1alpha1.BackupFailed || cond == nil || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.want) {
				t.Fatalf("ended %s: %+v", b.Status.Phase, cond)
			}
			if len(f.dialer.roles) != 0 || len(f.files("nightly")) != 0 {
				t.Errorf("calls %v, files %v", f.dialer.roles, f.files("nightly"))
			}
		})
	}
}
