package itest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/upload"
	"ichor.dev/ichor/test/objectstore"
)

// uploadRestore: an admin takes demo's etcd snapshot elsewhere (here: the
// etcd-snapshot download), changes the cluster, uploads the snapshot into
// a TalosBackup through talosbackups/NAME/upload with kubectl, and
// restores it into the running cluster, which then holds exactly the
// snapshot's objects. An operator may not upload; bytes that are not the
// digest's are refused and nothing of them kept; and an Ichor admin who
// calls ichor-controller's upload endpoint directly, to name another
// uploader, is refused there.
func (d *DemoCluster) UploadRestore(t *testing.T, srv *objectstore.Server) {
	ctx := d.Ctx
	rc, err := d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(metav1.NamespaceDefault)
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "uploaded"}, Data: map[string]string{"v": "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snapshot := filepath.Join(t.TempDir(), "etcd.snapshot")
	if err := d.Etcd.PrepareSnapshot(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := KubectlCmd(ctx, t, append(Admin, "get", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosmachines/cp-1/etcd-snapshot")...)
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("download the snapshot: %v\n%s", err, stderr.String())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if _, err := configMaps.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "uploaded"}, Data: map[string]string{"v": "after"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-upload"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A controller that serves uploads where ichor-apiserver sends them.
	tune := func(o *ctrlcmd.Options) {
		d.Tune(o)
		o.OperationStepTimeout = ClusterWait
		o.UploadBindAddress = CP.ControllerUpload.Address
		o.UploadCertFile, o.UploadKeyFile = CP.ControllerUpload.CertFile, CP.ControllerUpload.KeyFile
	}
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, tune)

	uploadBackup := func(name, digest string) {
		t.Helper()
		MustApply(ctx, t, "apiVersion: ichor.dev/v1alpha1\nkind: TalosBackup\nmetadata: {name: "+name+", namespace: "+d.Ns+"}\n"+
			"spec: {clusterName: demo, upload: {digest: '"+digest+"'}}\n")
	}
	uploadBackup("uploaded", digest)
	uploadBackup("wrong-digest", "sha256:"+strings.Repeat("0", 64))
	// Only who may upload may create a backup that awaits one.
	byOperator := []byte("apiVersion: ichor.dev/v1alpha1\nkind: TalosBackup\nmetadata: {name: operators-upload, namespace: " + d.Ns + "}\n" +
		"spec: {clusterName: demo, upload: {digest: '" + digest + "'}}\n")
	if out, err := CP.KubectlWithInput(ctx, byOperator, append(Operator, "create", "-f", "-")...); err == nil ||
		!strings.Contains(out+err.Error(), `needs the "create" verb on resource "talosbackups", subresource "upload"`) {
		t.Fatalf("an operator created a backup awaiting an upload: %v\n%s", err, out)
	}
	path := func(name string) string {
		return "/apis/ichor.dev/v1alpha1/namespaces/" + d.Ns + "/talosbackups/" + name + "/" + v1alpha1.UploadSubresource
	}
	send := func(who []string, name string) (string, error) {
		return CP.Kubectl(ctx, append(who, "create", "--raw", path(name), "-f", snapshot)...)
	}

	waiting := d.WaitBackup(t, "uploaded", "waiting for its upload", func(b *v1alpha1.TalosBackup) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BackupConditionSucceeded)
		return c != nil && c.Reason == v1alpha1.BackupReasonAwaitingUpload
	})
	if waiting.Status.Phase != v1alpha1.BackupPending {
		t.Fatalf("an upload backup before its upload: %s", waiting.Status.Phase)
	}

	if out, err := send(Operator, "uploaded"); err == nil || !strings.Contains(out+err.Error(), "forbidden") {
		t.Fatalf("an operator uploaded a snapshot: %v\n%s", err, out)
	}
	if out, err := send(Admin, "before-restore"); err == nil || !strings.Contains(out+err.Error(), "is a backup the controller takes, not an upload") {
		t.Fatalf("an upload into a backup the controller took: %v\n%s", err, out)
	}
	out, err := send(Admin, "wrong-digest")
	if err == nil || !strings.Contains(out+err.Error(), "but spec.upload.digest is sha256:"+strings.Repeat("0", 64)) {
		t.Fatalf("an upload whose bytes are not the digest's: %v\n%s", err, out)
	}
	wrong := d.WaitBackupEnds(t, "wrong-digest", v1alpha1.BackupFailed)
	if c := meta.FindStatusCondition(wrong.Status.Conditions, v1alpha1.BackupConditionSucceeded); c == nil || c.Reason != v1alpha1.BackupReasonDigestMismatch {
		t.Fatalf("the refused upload's record: %+v", wrong.Status)
	}
	if keys := d.BackupKeys(t, srv, "wrong-digest"); len(keys) != 0 {
		t.Fatalf("the refused upload left objects: %v", keys)
	}

	// An Ichor admin (a ServiceAccount bound to ichor-admin) goes around
	// ichor-apiserver to the controller's endpoint, to upload in
	// someone else's name: authenticated, and refused.
	direct := func(token string) (int, string) {
		t.Helper()
		pool, err := certutil.NewPool(CP.ControllerUpload.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+CP.ControllerUpload.Address+upload.Path(d.Ns, "uploaded"), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(upload.UploaderHeader, "carol")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := direct(""); code != http.StatusUnauthorized {
		t.Fatalf("an anonymous upload to the controller: %d %s", code, body)
	}
	if code, body := direct(IchorAdminToken(ctx, t, d.Ns, "mallory")); code != http.StatusForbidden || !strings.Contains(body, "may not hand uploads to ichor-controller") {
		t.Fatalf("an Ichor admin's upload straight to the controller: %d %s", code, body)
	}
	if b := d.GetBackup(t, "uploaded"); b.Status.Phase != v1alpha1.BackupPending {
		t.Fatalf("after the refused uploads the backup is %s", b.Status.Phase)
	}

	// An upload whose client goes away mid-stream: nothing of it is kept,
	// and the backup takes another upload.
	admins := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin"))
	err = admins.IchorV1alpha1().RESTClient().Post().Namespace(d.Ns).Resource("talosbackups").Name("uploaded").SubResource(v1alpha1.UploadSubresource).
		Body(io.MultiReader(bytes.NewReader(data[:len(data)/2]), &GoingAway{Ready: func() {
			// Gone once the controller writes what it received. (No t.Fatal
			// here: the transport reads the body on its own goroutine; the
			// checks below fail if it never did.)
			_ = wait.PollUntilContextTimeout(ctx, ControllerPoll, time.Minute, true, func(ctx context.Context) (bool, error) {
				b, err := admins.IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, "uploaded", metav1.GetOptions{})
				return err == nil && b.Status.Phase == v1alpha1.BackupRunning, nil
			})
		}})).Do(ctx).Error()
	if err == nil {
		t.Fatal("an upload cut off mid-stream succeeded")
	}
	cut := d.WaitBackupEnds(t, "uploaded", v1alpha1.BackupFailed)
	if c := meta.FindStatusCondition(cut.Status.Conditions, v1alpha1.BackupConditionSucceeded); c == nil || c.Reason != v1alpha1.BackupReasonUploadInterrupted {
		t.Fatalf("the cut-off upload's record: %+v", cut.Status)
	}
	if keys := d.BackupKeys(t, srv, "uploaded"); len(keys) != 0 {
		t.Fatalf("the cut-off upload left objects: %v", keys)
	}

	// A backup deleted while its uploader stalls mid-stream: the upload
	// stops without waiting for the next byte, what reached the target is
	// deleted, and then the record goes.
	uploadBackup("doomed", digest)
	release := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		sent <- admins.IchorV1alpha1().RESTClient().Post().Namespace(d.Ns).Resource("talosbackups").Name("doomed").SubResource(v1alpha1.UploadSubresource).
			Body(io.MultiReader(bytes.NewReader(data[:len(data)/2]), &GoingAway{Ready: func() { <-release }})).Do(ctx).Error()
	}()
	d.WaitBackup(t, "doomed", "receiving", func(b *v1alpha1.TalosBackup) bool {
		select {
		case err := <-sent:
			close(release)
			t.Fatalf("the upload into doomed ended before it was received: %v", err)
		default:
		}
		return b.Status.Phase == v1alpha1.BackupRunning
	})
	if out, err := CP.Kubectl(ctx, append(Admin, "-n", d.Ns, "delete", "talosbackup", "doomed", "--timeout=60s")...); err != nil {
		close(release)
		t.Fatalf("delete a backup mid-upload: %v\n%s", err, out)
	}
	if keys := d.BackupKeys(t, srv, "doomed"); len(keys) != 0 {
		t.Errorf("the deleted backup's upload left objects: %v", keys)
	}
	close(release)
	if err := <-sent; err == nil {
		t.Error("an upload into a backup deleted mid-stream succeeded")
	}

	// The admin's upload, with the CLI: it finds the backup it would
	// create, with the same digest, and streams the file into it.
	RunIchor(ctx, t, nil, "olivia", "ichor:operator", "--namespace="+d.Ns, "upload-snapshot", "uploaded", "--cluster", "demo", "-f", snapshot).
		Fails(t, "an operator's ichor upload-snapshot", "forbidden")
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+d.Ns, "upload-snapshot", "uploaded", "--cluster", "demo", "-f", snapshot).
		Ok(t, "ichor upload-snapshot", "talosbackup.ichor.dev/uploaded uploaded")
	got := d.GetBackup(t, "uploaded")
	if len(got.Status.Files) != 1 || got.Status.Files[0].Digest != digest || got.Status.Files[0].ContentSize != int64(len(data)) ||
		got.Status.Files[0].Content != v1alpha1.BackupContentEtcdSnapshot {
		t.Fatalf("the uploaded backup's files: %+v", got.Status.Files)
	}
	if keys := d.BackupKeys(t, srv, "uploaded"); len(keys) != 2 {
		t.Fatalf("the uploaded backup's objects: %v; want the snapshot and the manifest", keys)
	}
	WaitEventSaying(ctx, t, d.Ns, "uploaded", corev1.EventTypeNormal, v1alpha1.EventSnapshotUploaded, "carol uploaded an etcd snapshot of")
	out, err = send(Admin, "uploaded")
	if err == nil || !strings.Contains(out+err.Error(), "already holds its uploaded snapshot") {
		t.Fatalf("a second upload into the same backup: %v\n%s", err, out)
	}

	restore := "clusterName: demo\ntype: etcd-restore\netcdRestore: {backup: uploaded, identitySecret: restore-identity}"
	d.CreateOperation(t, Admin, "restore-uploaded", restore)
	d.StartOperation(t, Admin, "restore-uploaded")
	d.WaitOperationEnds(t, "restore-uploaded", v1alpha1.OperationSucceeded)
	rc, err = d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	configMaps = kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(metav1.NamespaceDefault)
	if cm, err := configMaps.Get(ctx, "uploaded", metav1.GetOptions{}); err != nil || cm.Data["v"] != "before" {
		t.Fatalf("after restoring the upload: uploaded = %v, %v; want the snapshot's v=before", cm, err)
	}
	if _, err := configMaps.Get(ctx, "after-upload", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after restoring the upload, the object created after the snapshot: %v; want NotFound", err)
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, d.Tune)
}

// IchorAdminToken is a token of a new ServiceAccount name in ns, bound to
// ichor-admin: an Ichor admin as kube-apiserver authenticates one.
func IchorAdminToken(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	token := ServiceAccountToken(ctx, t, ns, name)
	BindClusterRole(ctx, t, ns, name, "ichor-admin")
	return token
}

// ServiceAccountToken creates the ServiceAccount name in ns and returns a
// token of it.
func ServiceAccountToken(ctx context.Context, t testing.TB, ns, name string) string {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// BindClusterRole binds the ClusterRole role to the ServiceAccount name in
// ns, until the test ends.
func BindClusterRole(ctx context.Context, t testing.TB, ns, name, role string) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.WithoutCancel(ctx), ns+"-"+name, metav1.DeleteOptions{})
	})
}

// GetBackup reads TalosBackup name.
func (d *DemoCluster) GetBackup(t *testing.T, name string) *v1alpha1.TalosBackup {
	t.Helper()
	b, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(d.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WaitBackup waits until TalosBackup name is as done says.
func (d *DemoCluster) WaitBackup(t *testing.T, name, what string, done func(*v1alpha1.TalosBackup) bool) *v1alpha1.TalosBackup {
	t.Helper()
	var last *v1alpha1.TalosBackup
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = b
		return done(b), nil
	})
	if err != nil {
		t.Fatalf("TalosBackup %s %s: %v; last %+v", name, what, err, last)
	}
	return last
}

// GoingAway fails its first read, as a client that goes away does, once
// ready returned.
type GoingAway struct{ Ready func() }

func (g *GoingAway) Read([]byte) (int, error) {
	g.Ready()
	return 0, errors.New("the uploader went away")
}
