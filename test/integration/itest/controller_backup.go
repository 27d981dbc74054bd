package itest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/controller/backup"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/objectstore"
	"ichor.dev/ichor/test/talossim"
)

// BackupBucket is the bucket demo's backups go to.
const BackupBucket = "demo-backups"

// backups: an admin gives demo a backup setting that writes to a real
// S3-compatible server (SeaweedFS over TLS); an operator backs up now;
// every way the target can fail is a failed backup with its reason that
// deletes nothing; then the schedule runs every minute, records two
// backups, and prunes the older one to the retention.
func (d *DemoCluster) Backups(t *testing.T) {
	ctx := d.Ctx
	srv, err := objectstore.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.CreateBucket(ctx, BackupBucket); err != nil {
		t.Fatal(err)
	}
	identity, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	for name, c := range map[string]objectstore.Credentials{
		"s3-writer": srv.Admin, "s3-reader": srv.ReadOnly,
		"s3-wrong": {AccessKeyID: srv.Admin.AccessKeyID, SecretAccessKey: "not-the-secret-key"},
	} {
		_, err := kube.CoreV1().Secrets(d.Ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string][]byte{store.KeyS3AccessKeyID: []byte(c.AccessKeyID), store.KeyS3SecretAccessKey: []byte(c.SecretAccessKey)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Backups after the first are not compressed: zstd is pure Go, which the
	// race detector slows tenfold on demo's 256 MiB snapshots.
	compression := v1alpha1.BackupCompressionZstd
	setting := func(schedule, endpoint, bucket, secret, retention string) string {
		return fmt.Sprintf(`{"spec":{"backup":{"schedule":%q,"timeZone":"Europe/Paris",
"target":{"s3":{"bucket":%q,"region":%q,"endpoint":%q,"forcePathStyle":true,"credentialsRef":{"name":%q},"caBundle":%q}},
"encryption":{"recipients":[%q]},"compression":%q,"retention":%s}}}`,
			schedule, bucket, objectstore.Region, endpoint, secret, string(srv.CAPEM), identity.Recipient().String(), compression, retention)
	}
	set := func(t *testing.T, who []string, patch string) (string, error) {
		t.Helper()
		return CP.Kubectl(ctx, append(who, "-n", d.Ns, "patch", "taloscluster", "demo", "--subresource=backup", "--type=merge", "-p", patch)...)
	}
	const yearly = "0 3 1 1 *" // nothing scheduled while the test runs
	good := setting(yearly, srv.Endpoint, BackupBucket, "s3-writer", `{"count":1}`)

	t.Run("bad settings are refused with the field, an identity never echoed", func(t *testing.T) {
		for _, c := range []struct{ patch, want string }{
			{setting("61 * * * *", srv.Endpoint, BackupBucket, "s3-writer", `{"count":1}`), "spec.backup.schedule"},
			{setting("TZ=UTC 0 3 * * *", srv.Endpoint, BackupBucket, "s3-writer", `{"count":1}`), "set timeZone instead"},
			{setting(yearly, srv.Endpoint, BackupBucket, "s3-writer", `{"count":0}`), "spec.backup.retention.count"},
			{setting(yearly, srv.Endpoint, BackupBucket, "s3-writer", `{}`), "spec.backup.retention: Required"},
			{setting(yearly, "http://"+strings.TrimPrefix(srv.Endpoint, "https://"), BackupBucket, "s3-writer", `{"count":1}`), "must use the https scheme"},
			{strings.Replace(good, identity.Recipient().String(), "age1notakey", 1), "spec.backup.encryption.recipients[0]"},
			{strings.Replace(good, identity.Recipient().String(), identity.String(), 1), "is an age identity (a secret key)"},
			{strings.Replace(good, `"timeZone":"Europe/Paris"`, `"timeZone":"Mars/Olympus"`, 1), "spec.backup.timeZone"},
		} {
			out, err := set(t, Admin, c.patch)
			if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, c.want) {
				t.Errorf("setting %s: want a refusal naming %q, got %s", c.want, c.want, Tail(msg))
			} else if strings.Contains(Tail(msg), "AGE-SECRET-KEY") {
				t.Errorf("the refusal echoes an age identity: %s", Tail(msg))
			}
		}
	})

	t.Run("an operator may not set backups; an admin may", func(t *testing.T) {
		out, err := set(t, Operator, good)
		if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "forbidden") || !strings.Contains(msg, "talosclusters/backup") {
			t.Fatalf("an operator's backup setting: %s", Tail(msg))
		}
		out, err = CP.Kubectl(ctx, append(Operator, "-n", d.Ns, "patch", "taloscluster", "demo", "--type=merge", "-p", good)...)
		if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "talosclusters/backup") {
			t.Fatalf("an operator's backup setting through the main endpoint: %s", Tail(msg))
		}
		if out, err := set(t, Admin, good); err != nil {
			t.Fatalf("an admin's backup setting: %v\n%s", err, out)
		}
	})

	var first *v1alpha1.TalosBackup
	t.Run("an operator backs up now: a snapshot and every running config, encrypted", func(t *testing.T) {
		// Only the schedule marks a backup as its own, which retention may prune.
		squat := fmt.Sprintf("apiVersion: ichor.dev/v1alpha1\nkind: TalosBackup\nmetadata: {name: forged, namespace: %s}\nspec: {clusterName: demo, scheduledAt: \"2026-01-01T00:00:00Z\"}\n", d.Ns)
		if out, err := CP.KubectlWithInput(ctx, []byte(squat), append(Operator, "create", "-f", "-")...); err == nil || !strings.Contains(fmt.Sprint(err, out), "talosbackups/schedule") && !strings.Contains(fmt.Sprint(err, out), `subresource "schedule"`) {
			t.Fatalf("an operator marked a backup as scheduled: %v\n%s", err, Tail(fmt.Sprint(out)))
		}
		if out, err := CP.KubectlWithInput(ctx, []byte(d.BackupManifest("viewer-now")), append(Viewer, "create", "-f", "-")...); err == nil {
			t.Fatalf("a viewer created a TalosBackup:\n%s", out)
		}
		first = d.BackUpNow(t, "now-1", v1alpha1.BackupSucceeded)
		if !strings.HasPrefix(first.Status.Location, "s3://"+BackupBucket+"/"+d.Ns+"/demo/now-1/") {
			t.Errorf("location %q", first.Status.Location)
		}
		var names []string
		for _, f := range first.Status.Files {
			names = append(names, f.Name)
		}
		want := []string{"etcd.snapshot.zst.age", "machines/cp-1.yaml.zst.age", "machines/cp-2.yaml.zst.age", "machines/cp-3.yaml.zst.age",
			"machines/worker-1.yaml.zst.age", "machines/worker-2.yaml.zst.age"}
		if !slices.Equal(names, want) {
			t.Fatalf("files %v, want %v", names, want)
		}
		keys := d.BackupKeys(t, srv, "now-1")
		wantKeys := append(Prefixed(d.Ns+"/demo/now-1/", want), d.Ns+"/demo/now-1/"+backup.ManifestFile)
		slices.Sort(wantKeys)
		if !slices.Equal(keys, wantKeys) {
			t.Fatalf("objects %v, want %v", keys, wantKeys)
		}
		// The snapshot decrypts with the admin's identity only, matches its
		// digest, and is an etcd database.
		snapshot := d.ReadBackupFile(t, srv, first, first.Status.Files[0], identity)
		dbPath := filepath.Join(t.TempDir(), "db")
		if err := os.WriteFile(dbPath, snapshot, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("the snapshot is no bbolt database: %v", err)
		}
		if err := db.View(func(tx *bolt.Tx) error {
			if tx.Bucket([]byte("key")) == nil {
				return fmt.Errorf("no key bucket")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		other, _ := age.GenerateX25519Identity()
		if _, err := archive.Read(io.Discard, bytes.NewReader(d.Object(t, srv, first, first.Status.Files[0])), []age.Identity{other}, first.Status.Compression, ""); err == nil {
			t.Fatal("another identity decrypted the snapshot")
		}
		cfg := d.ReadBackupFile(t, srv, first, first.Status.Files[1], identity)
		if !bytes.Contains(cfg, []byte("clusterName: demo")) {
			t.Fatalf("cp-1's config does not name its cluster:\n%.300s", cfg)
		}
		// Nothing readable by the operator says more than where and how big.
		if strings.Contains(MustKubectl(ctx, t, append(Operator, "-n", d.Ns, "get", "talosbackup", "now-1", "-o", "yaml")...), "secretAccessKey") {
			t.Fatal("the record shows a credential")
		}
		out := MustKubectl(ctx, t, append(Viewer, "-n", d.Ns, "get", "talosbackups")...)
		if !strings.Contains(out, "SNAPSHOT DIGEST") || !strings.Contains(out, first.Status.Files[0].Digest[:19]) {
			t.Fatalf("kubectl get talosbackups:\n%s", out)
		}
		d.WaitBackupCondition(t, metav1.ConditionTrue, v1alpha1.BackupReasonWritten)
		if out, err := CP.Kubectl(ctx, append(Operator, "-n", d.Ns, "delete", "talosbackup", "now-1")...); err == nil {
			t.Fatalf("an operator deleted a backup:\n%s", out)
		}
		compression = v1alpha1.BackupCompressionNone
	})

	unreachable := func() string {
		ports, err := proc.FreePorts("127.0.0.1", 1)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	}()
	for i, c := range []struct {
		name, patch, reason string
	}{
		{"a read-only identity", setting(yearly, srv.Endpoint, BackupBucket, "s3-reader", `{"count":1}`), v1alpha1.BackupReasonTargetRefused},
		{"a wrong secret key", setting(yearly, srv.Endpoint, BackupBucket, "s3-wrong", `{"count":1}`), v1alpha1.BackupReasonTargetRefused},
		{"a bucket that does not exist", setting(yearly, srv.Endpoint, "no-such-bucket", "s3-writer", `{"count":1}`), v1alpha1.BackupReasonBucketNotFound},
		{"an unreachable store", setting(yearly, unreachable, BackupBucket, "s3-writer", `{"count":1}`), v1alpha1.BackupReasonTargetUnavailable},
		{"a credentials Secret that does not exist", setting(yearly, srv.Endpoint, BackupBucket, "s3-missing", `{"count":1}`), v1alpha1.BackupReasonCredentialsNotFound},
	} {
		t.Run("a backup to "+c.name+" fails with the reason and deletes nothing", func(t *testing.T) {
			if out, err := set(t, Admin, c.patch); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			name := fmt.Sprintf("failing-%d", i)
			b := d.BackUpNow(t, name, v1alpha1.BackupFailed)
			cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded)
			if cond == nil || cond.Reason != c.reason {
				t.Fatalf("condition %+v, want reason %s", cond, c.reason)
			}
			if strings.Contains(cond.Message, srv.Admin.SecretAccessKey) || strings.Contains(cond.Message, srv.ReadOnly.SecretAccessKey) {
				t.Fatalf("the failure names a secret key: %s", cond.Message)
			}
			d.WaitBackupCondition(t, metav1.ConditionFalse, c.reason)
			WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeWarning, v1alpha1.EventBackupFailed)
			if len(d.BackupKeys(t, srv, name)) != 0 {
				t.Fatalf("the failed backup left objects: %v", d.BackupKeys(t, srv, name))
			}
			if _, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, "now-1", metav1.GetOptions{}); err != nil {
				t.Fatalf("the earlier backup is gone: %v", err)
			}
			if len(d.BackupKeys(t, srv, "now-1")) != 7 {
				t.Fatalf("the earlier backup's objects changed: %v", d.BackupKeys(t, srv, "now-1"))
			}
		})
	}

	t.Run("a controller stopped mid-backup writes it again from the start", func(t *testing.T) {
		if out, err := set(t, Admin, setting(yearly, srv.Endpoint, BackupBucket, "s3-writer", `{"count":1}`)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := CP.KubectlWithInput(ctx, []byte(d.BackupManifest("restarted")), append(Operator, "create", "-f", "-")...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		wctx, cancel := context.WithTimeout(ctx, ClusterWait)
		defer cancel()
		w, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=restarted"})
		if err != nil {
			t.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if b, ok := ev.Object.(*v1alpha1.TalosBackup); ok && b.Status.Phase == v1alpha1.BackupRunning {
				break
			}
		}
		w.Stop()
		d.Controller.Stop()
		b, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, "restarted", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped the controller with the backup %s and %d objects written", b.Status.Phase, len(d.BackupKeys(t, srv, "restarted")))
		d.Controller = RunController(d.Parent, d.Tune)
		b = d.WaitBackupEnds(t, "restarted", v1alpha1.BackupSucceeded)
		if keys := d.BackupKeys(t, srv, "restarted"); len(keys) != 7 || len(b.Status.Files) != 6 {
			t.Fatalf("after the restart: objects %v, files %+v", keys, b.Status.Files)
		}
		d.ReadBackupFile(t, srv, b, b.Status.Files[0], identity)
	})

	t.Run("every minute: two runs recorded, the older pruned to the retention", func(t *testing.T) {
		if out, err := set(t, Admin, setting("* * * * *", srv.Endpoint, BackupBucket, "s3-writer", `{"count":1}`)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		scheduled := func(l *v1alpha1.TalosBackupList) []v1alpha1.TalosBackup {
			var out []v1alpha1.TalosBackup
			for _, b := range l.Items {
				if b.Spec.ScheduledAt != nil && b.Status.Phase == v1alpha1.BackupSucceeded {
					out = append(out, b)
				}
			}
			return out
		}
		// Time passes on the schedule's clock a minute at a time: once for
		// each run the test waits for, and again when that run failed.
		mover := &scheduleMover{d: d}
		mover.advance()
		var older string
		list := d.WaitBackups(t, "a scheduled backup succeeded", mover.until(func(l *v1alpha1.TalosBackupList) bool { return len(scheduled(l)) >= 1 }), srv)
		older = scheduled(list)[0].Name
		if len(d.BackupKeys(t, srv, older)) != 7 {
			t.Fatalf("the scheduled backup's objects: %v", d.BackupKeys(t, srv, older))
		}
		// A store may fail a run now and then (the SDK retries a part three
		// times): the schedule goes on, and retention waits for a success.
		var newer string
		mover.advance()
		d.WaitBackups(t, "a second scheduled backup succeeded, and the older and the failed ones were pruned", mover.until(func(l *v1alpha1.TalosBackupList) bool {
			newer = ""
			for _, b := range scheduled(l) {
				if b.Name != older {
					newer = b.Name
				}
			}
			if newer == "" {
				return false
			}
			var newest *v1alpha1.TalosBackup
			for i, b := range l.Items {
				if b.Name == newer {
					newest = &l.Items[i]
				}
			}
			for _, b := range l.Items {
				if b.Name == older ||
					b.Spec.ScheduledAt != nil && b.Status.Phase == v1alpha1.BackupFailed && b.Status.CompletedAt.Before(newest.Status.CompletedAt) {
					return false
				}
			}
			return true
		}), srv)
		if keys := d.BackupKeys(t, srv, older); len(keys) != 0 {
			t.Fatalf("pruned backup %s left objects: %v", older, keys)
		}
		// Backups made by hand are not the retention's.
		if len(d.BackupKeys(t, srv, "now-1")) != 7 {
			t.Fatalf("the backup made by hand was pruned: %v", d.BackupKeys(t, srv, "now-1"))
		}
		if len(d.BackupKeys(t, srv, newer)) != 7 {
			t.Fatalf("the kept backup's objects: %v", d.BackupKeys(t, srv, newer))
		}
		c := WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionBackupSucceeded, metav1.ConditionTrue, v1alpha1.BackupReasonWritten)
		if c.Status.Backup == nil || c.Status.Backup.LastSuccessfulBackup == "" || c.Status.Backup.LastScheduleTime == nil {
			t.Fatalf("status.backup %+v", c.Status.Backup)
		}
		// Suspended, nothing more is scheduled. An admin deletes a backup,
		// and its files go with it; annotated keep-files, they stay.
		if out, err := set(t, Admin, `{"spec":{"backup":{"suspend":true}}}`); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		MustKubectl(ctx, t, append(Admin, "-n", d.Ns, "delete", "talosbackup", "now-1", "--wait=true")...)
		if keys := d.BackupKeys(t, srv, "now-1"); len(keys) != 0 {
			t.Fatalf("a deleted backup left objects: %v", keys)
		}
		if out, err := CP.Kubectl(ctx, append(Operator, "-n", d.Ns, "annotate", "talosbackup", newer, v1alpha1.AnnotationKeepFiles+"=true")...); err == nil {
			t.Fatalf("an operator annotated a backup:\n%s", out)
		}
		MustKubectl(ctx, t, append(Admin, "-n", d.Ns, "annotate", "talosbackup", newer, v1alpha1.AnnotationKeepFiles+"=true")...)
		MustKubectl(ctx, t, append(Admin, "-n", d.Ns, "delete", "talosbackup", newer, "--wait=true")...)
		if keys := d.BackupKeys(t, srv, newer); len(keys) != 7 {
			t.Fatalf("a backup deleted with keep-files lost its objects: %v", keys)
		}
		WaitEvent(ctx, t, d.Ns, newer, corev1.EventTypeWarning, v1alpha1.EventBackupFilesKept)
	})

	t.Run("an admin restores etcd from a backup into the running cluster; an operator may not", func(t *testing.T) {
		d.EtcdRestore(t, srv, identity)
	})

	t.Run("an admin uploads a snapshot taken elsewhere and restores it; nobody else may hand the controller an upload", func(t *testing.T) {
		d.UploadRestore(t, srv)
	})

	t.Run("a volume target: files in a directory below --backup-volume-dir, none outside", func(t *testing.T) {
		out, err := set(t, Admin, `{"spec":{"backup":{"target":{"s3":null,"volume":{"path":"../outside"}}}}}`)
		if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "spec.backup.target.volume.path") {
			t.Fatalf("a volume path leaving the directory: %s", Tail(msg))
		}
		if out, err := set(t, Admin, `{"spec":{"backup":{"target":{"s3":null,"volume":{"path":"clusters/demo"}}}}}`); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		b := d.BackUpNow(t, "to-volume", v1alpha1.BackupSucceeded)
		folder := filepath.Join(d.BackupVolumeDir, "clusters", "demo", d.Ns, "demo", "to-volume")
		if want := "file://" + filepath.ToSlash(folder) + "/"; b.Status.Location != want {
			t.Fatalf("location %s, want %s", b.Status.Location, want)
		}
		for _, f := range b.Status.Files {
			data, err := os.ReadFile(filepath.Join(folder, filepath.FromSlash(f.Name)))
			if err != nil {
				t.Fatal(err)
			}
			var content bytes.Buffer
			if _, err := archive.Read(&content, bytes.NewReader(data), []age.Identity{identity}, b.Status.Compression, f.Digest); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
		}
		// Files are created as fileblob does (0666 less the umask); the
		// directories it creates are the controller's alone.
		for dir := folder; dir != d.BackupVolumeDir; dir = filepath.Dir(dir) {
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("directory %s: %v, %v; want 0700", dir, fi.Mode(), err)
			}
		}
		MustKubectl(ctx, t, append(Admin, "-n", d.Ns, "delete", "talosbackup", "to-volume", "--wait=true")...)
		if _, err := os.Stat(folder); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the deleted backup's folder: %v", err)
		}
	})
}

// etcdRestore: objects written after a backup are gone once an admin
// restored it with kubectl, and those of the backup are back, read through
// the cluster's own kube-apiserver. A wrong identity and a corrupt snapshot
// fail before any member is touched; an operator may not start a restore;
// a controller stopped mid-restore resumes without wiping a node twice.
func (d *DemoCluster) EtcdRestore(t *testing.T, srv *objectstore.Server, identity *age.X25519Identity) {
	ctx := d.Ctx
	rc, err := d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(metav1.NamespaceDefault)
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.BackUpNow(t, "before-restore", v1alpha1.BackupSucceeded)
	tampered := d.BackUpNow(t, "tampered", v1alpha1.BackupSucceeded)
	if _, err := configMaps.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "after"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The tampered backup's snapshot is replaced by another file of its own,
	// encrypted to the same recipient: it decrypts, but not to its digest.
	key := strings.TrimPrefix(tampered.Status.Location, "s3://"+BackupBucket+"/")
	if _, err := srv.Client(srv.Admin).PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(BackupBucket), Key: aws.String(key + tampered.Status.Files[0].Name),
		Body: bytes.NewReader(d.Object(t, srv, tampered, tampered.Status.Files[1])),
	}); err != nil {
		t.Fatal(err)
	}
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	for name, id := range map[string]string{"restore-identity": identity.String(), "other-identity": other.String()} {
		if _, err := kube.CoreV1().Secrets(d.Ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{v1alpha1.IdentitySecretKey: []byte(id)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restore := func(backupName, secret string) string {
		return fmt.Sprintf("clusterName: demo\ntype: etcd-restore\netcdRestore: {backup: %s, identitySecret: %s}", backupName, secret)
	}
	untouched := func(t *testing.T) {
		t.Helper()
		if got := len(d.Etcd.Members()); got != 3 {
			t.Fatalf("a refused restore left %d etcd members", got)
		}
		if cm, err := configMaps.Get(ctx, "kept", metav1.GetOptions{}); err != nil || cm.Data["v"] != "after" {
			t.Fatalf("a refused restore changed the data: %v, %v", cm, err)
		}
	}

	for _, c := range []struct{ name, backup, secret, want string }{
		{"restore-other-identity", "before-restore", "other-identity", "matches none of the recipients TalosBackup before-restore was encrypted to (" + identity.Recipient().String()},
		{"restore-tampered", "tampered", "restore-identity", "the etcd snapshot of TalosBackup tampered is corrupt"},
		{"restore-no-identity", "before-restore", "no-such-secret", "spec.etcdRestore.identitySecret: Secret no-such-secret does not exist"},
	} {
		d.CreateOperation(t, Admin, c.name, restore(c.backup, c.secret))
		d.StartOperation(t, Admin, c.name)
		op := d.WaitOperationEnds(t, c.name, v1alpha1.OperationFailed)
		cond := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
		if cond == nil || cond.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(cond.Message, c.want) || len(op.Status.Steps) != 0 {
			t.Fatalf("%s: %s; want a refusal before any step saying %q", c.name, DescribeOperation(op), c.want)
		}
		if strings.Contains(cond.Message, "AGE-SECRET-KEY") {
			t.Fatalf("%s: the refusal echoes an identity: %s", c.name, cond.Message)
		}
		untouched(t)
	}

	d.CreateOperation(t, Operator, "restore", restore("before-restore", "restore-identity"))
	out, err := CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/restore/start", "-f", "-")...)
	if err == nil || !strings.Contains(out+err.Error(), "forbidden") {
		t.Fatalf("an operator started an etcd-restore: %v\n%s", err, out)
	}
	untouched(t)

	// A restore whose upload the node crashes on fails after the wipes,
	// leaving etcd down everywhere; another restore, which an admin lets
	// past the ClusterHealth check, finishes it.
	if err := d.Nodes["cp-1"].SetFaults(talossim.Faults{CrashCalls: 1, CrashMethod: "EtcdRecover"}); err != nil {
		t.Fatal(err)
	}
	d.CreateOperation(t, Admin, "restore-crashed", restore("before-restore", "restore-identity"))
	d.StartOperation(t, Admin, "restore-crashed")
	crashed := d.WaitOperationEnds(t, "restore-crashed", v1alpha1.OperationFailed)
	if i := slices.IndexFunc(crashed.Status.Steps, func(s v1alpha1.OperationStep) bool { return s.Phase == v1alpha1.OperationFailed }); i < 0 ||
		crashed.Status.Steps[i].Name() != "cp-1 recover-etcd" {
		t.Fatalf("the crashed restore: %s", DescribeOperation(crashed))
	}
	if err := d.Nodes["cp-1"].SetFaults(talossim.Faults{}); err != nil {
		t.Fatal(err)
	}
	override := []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"Override","check":"ClusterHealth","reason":"restore-crashed left etcd down"}`)
	if out, err := CP.KubectlWithInput(ctx, override, append(Admin, "create", "--raw",
		"/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosclusters/demo/override", "-f", "-")...); err != nil {
		t.Fatalf("an admin's override: %v\n%s", err, out)
	}

	// The recovery's step lasts until the recovered control plane serves,
	// longer than demo's short step timeout allows under the race detector.
	restoreTune := func(o *ctrlcmd.Options) {
		d.Tune(o)
		o.OperationStepTimeout = ClusterWait
	}
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, restoreTune)
	resets := map[string]int{}
	for name, n := range d.Nodes {
		resets[name] = TimesEntered(n, talossim.PhaseResetting)
	}
	// The controller is stopped while a wipe is in flight, and started
	// again: every control plane is still wiped exactly once.
	inFlight := d.StartWatching(t, Admin, "restore", "a wipe-etcd step running", func(op *v1alpha1.TalosOperation) bool {
		return slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
			return s.Action == v1alpha1.ActionWipeEtcd && s.Phase == v1alpha1.OperationRunning
		})
	})
	d.Controller.Stop()
	t.Logf("stopped the controller during the restore at %s", DescribeOperation(inFlight))
	d.Controller = RunController(d.Parent, restoreTune)
	op := d.WaitOperationEnds(t, "restore", v1alpha1.OperationSucceeded)
	for name, n := range d.Nodes {
		want := resets[name]
		if d.Roles[name] == v1alpha1.MachineRoleControlPlane {
			want++
		}
		if got := TimesEntered(n, talossim.PhaseResetting); got != want {
			t.Errorf("%s was reset %d times by the restore, want %d", name, got-resets[name], want-resets[name])
		}
	}
	var order []string
	for _, s := range op.Status.Steps {
		order = append(order, s.Name())
	}
	want := []string{"cp-2 leave-etcd", "cp-3 leave-etcd", "cp-1 wipe-etcd", "cp-2 wipe-etcd", "cp-3 wipe-etcd",
		"cp-1 recover-etcd", "cp-2 join-etcd", "cp-3 join-etcd", "worker-1 restart-kubelet", "worker-2 restart-kubelet"}
	if !slices.Equal(order, want) {
		t.Fatalf("steps %v, want %v", order, want)
	}
	for _, s := range op.Status.Steps[:2] {
		if !strings.Contains(s.Message, "nothing to leave") {
			t.Errorf("%s after the crashed restore: %q, want nothing to leave", s.Name(), s.Message)
		}
	}
	rc, err = d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	configMaps = kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(metav1.NamespaceDefault)
	if cm, err := configMaps.Get(ctx, "kept", metav1.GetOptions{}); err != nil || cm.Data["v"] != "before" {
		t.Fatalf("after the restore: kept = %v, %v; want the backup's v=before", cm, err)
	}
	if _, err := configMaps.Get(ctx, "later", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the restore, the object created after the backup: %v; want NotFound", err)
	}
	if got := len(d.Etcd.Members()); got != 3 {
		t.Fatalf("after the restore etcd has %d members, want the three control planes", got)
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, d.Tune)
}

// Tail is the end of a kubectl error: the server's answer, without the
// command line that quoted the request.
func Tail(msg string) string {
	if _, after, ok := strings.Cut(msg, "exit status"); ok {
		return "exit status" + after
	}
	return msg
}

func Prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

func (d *DemoCluster) BackupManifest(name string) string {
	return fmt.Sprintf("apiVersion: ichor.dev/v1alpha1\nkind: TalosBackup\nmetadata: {name: %s, namespace: %s}\nspec: {clusterName: demo}\n", name, d.Ns)
}

// BackUpNow creates TalosBackup name as the operator and waits for it to end in phase want.
func (d *DemoCluster) BackUpNow(t *testing.T, name string, want v1alpha1.BackupPhase) *v1alpha1.TalosBackup {
	t.Helper()
	if out, err := CP.KubectlWithInput(d.Ctx, []byte(d.BackupManifest(name)), append(Operator, "create", "-f", "-")...); err != nil {
		t.Fatalf("kubectl create TalosBackup %s: %v\n%s", name, err, out)
	}
	return d.WaitBackupEnds(t, name, want)
}

// WaitBackupEnds waits for TalosBackup name to end in phase want.
func (d *DemoCluster) WaitBackupEnds(t *testing.T, name string, want v1alpha1.BackupPhase) *v1alpha1.TalosBackup {
	t.Helper()
	var last *v1alpha1.TalosBackup
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		b, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = b
		return b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed, nil
	})
	if err != nil || last.Status.Phase != want {
		t.Fatalf("TalosBackup %s: want %s: %v; status %+v", name, want, err, last.Status)
	}
	return last
}

// scheduleMover moves demo's schedule clock to the next minute, so that a
// schedule that runs every minute runs once more.
type scheduleMover struct {
	d    *DemoCluster
	last time.Time
}

// advance moves the clock to the next minute after both its time and the
// wall clock's: the cluster was created on the wall clock, and a schedule
// runs from then.
func (m *scheduleMover) advance() {
	now := m.d.ScheduleClock.Now()
	if wall := time.Now(); wall.After(now) {
		now = wall
	}
	m.last = now.Truncate(time.Minute).Add(time.Minute)
	m.d.ScheduleClock.SetTime(m.last)
}

// until is done, and advances the clock when the run of the minute it moved
// to last failed (a store may fail a run now and then), so the schedule
// runs again; a run that succeeded asks for no more time.
func (m *scheduleMover) until(done func(*v1alpha1.TalosBackupList) bool) func(*v1alpha1.TalosBackupList) bool {
	return func(l *v1alpha1.TalosBackupList) bool {
		if done(l) {
			return true
		}
		if slices.ContainsFunc(l.Items, func(b v1alpha1.TalosBackup) bool {
			return b.Spec.ScheduledAt != nil && b.Spec.ScheduledAt.Time.Equal(m.last) && b.Status.Phase == v1alpha1.BackupFailed
		}) {
			m.advance()
		}
		return false
	}
}

func (d *DemoCluster) WaitBackups(t *testing.T, what string, done func(*v1alpha1.TalosBackupList) bool, srv *objectstore.Server) *v1alpha1.TalosBackupList {
	t.Helper()
	var last *v1alpha1.TalosBackupList
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = l
		return done(l), nil
	})
	if err != nil {
		var got []string
		if last != nil {
			for _, b := range last.Items {
				got = append(got, b.Name+"="+string(b.Status.Phase))
				if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded); c != nil && c.Status == metav1.ConditionFalse {
					got = append(got, "("+c.Message+")")
				}
			}
		}
		t.Fatalf("backups: %s: %v; have %v\nobject store log:\n%s", what, err, got, srv.LogTail())
	}
	return last
}

func (d *DemoCluster) WaitBackupCondition(t *testing.T, status metav1.ConditionStatus, reason string) {
	t.Helper()
	WaitCluster(d.Ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionBackupSucceeded, status, reason)
}

// BackupKeys lists the objects of backup name in the bucket.
func (d *DemoCluster) BackupKeys(t *testing.T, srv *objectstore.Server, name string) []string {
	t.Helper()
	keys, err := srv.Keys(d.Ctx, BackupBucket, d.Ns+"/demo/"+name+"/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Object reads a backup file's object with the store's own client.
func (d *DemoCluster) Object(t *testing.T, srv *objectstore.Server, b *v1alpha1.TalosBackup, f v1alpha1.BackupFile) []byte {
	t.Helper()
	key := strings.TrimPrefix(b.Status.Location, "s3://"+BackupBucket+"/") + f.Name
	out, err := srv.Client(srv.Admin).GetObject(d.Ctx, &s3.GetObjectInput{Bucket: aws.String(BackupBucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != f.StoredSize {
		t.Fatalf("%s: %d bytes stored, the record says %d", key, len(data), f.StoredSize)
	}
	return data
}

// ReadBackupFile decrypts a backup file with identity, checking its digest.
func (d *DemoCluster) ReadBackupFile(t *testing.T, srv *objectstore.Server, b *v1alpha1.TalosBackup, f v1alpha1.BackupFile, identity age.Identity) []byte {
	t.Helper()
	var content bytes.Buffer
	n, err := archive.Read(&content, bytes.NewReader(d.Object(t, srv, b, f)), []age.Identity{identity}, b.Status.Compression, f.Digest)
	if err != nil {
		t.Fatalf("%s: %v", f.Name, err)
	}
	if n != f.ContentSize {
		t.Fatalf("%s: %d bytes of content, the record says %d", f.Name, n, f.ContentSize)
	}
	return content.Bytes()
}

// BackUpToAVolume has demo backed up, encrypted, to a directory below the
// controller's --backup-volume-dir, once a year: what a shutdown needs, as
// it backs the cluster up before any node goes down.
func (d *DemoCluster) BackUpToAVolume(t *testing.T) {
	identity, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"backup":{"schedule":"0 3 1 1 *","target":{"volume":{"path":"clusters/demo"}},"encryption":{"recipients":[%q]},"retention":{"count":1}}}}`,
		identity.Recipient().String())
	if out, err := CP.Kubectl(d.Ctx, append(Admin, "-n", d.Ns, "patch", "taloscluster", "demo", "--subresource=backup", "--type=merge", "-p", patch)...); err != nil {
		t.Fatalf("set demo's backups to a volume: %v\n%s", err, out)
	}
}
