package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorfake "ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestSaveIsHonest: a stream cut partway is an error that says how much
// came, and leaves no file, neither the one asked for nor a part; a whole
// stream lands in the file, 0600, and says so.
func TestSaveIsHonest(t *testing.T) {
	dir := t.TempDir()
	var errOut bytes.Buffer
	o := &Options{IOStreams: genericiooptions.IOStreams{Out: io.Discard, ErrOut: &errOut}}
	path := filepath.Join(dir, "m1-etcd.snapshot")

	cut := io.MultiReader(strings.NewReader(strings.Repeat("x", 3000)), iotestErr{errors.New("stream error: stream ID 3; INTERNAL_ERROR")})
	err := save(context.Background(), o, cut, path, "etcd-snapshot m1")
	if err == nil || !strings.Contains(err.Error(), "cut after 2.9 KiB") || !strings.Contains(err.Error(), "nothing was saved to "+path) {
		t.Fatalf("cut stream: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a cut stream left %v", entries)
	}

	if err := save(context.Background(), o, strings.NewReader("snapshot"), path, "etcd-snapshot m1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "snapshot" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved %q (%v), mode %v", b, err, fi.Mode())
	}
	if !strings.Contains(errOut.String(), "etcd-snapshot m1: 8 B in") || !strings.Contains(errOut.String(), "to "+path) {
		t.Errorf("progress line %q", errOut.String())
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

// TestHolderHint: the refusals of ichor-apiserver and of kube-apiserver's
// RBAC name the lowest role that holds what is missing, as roles.yaml
// grants it.
func TestHolderHint(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{`user "alice" cannot approve TalosMachine: it needs the "approve" verb on resource "talosmachines", subresource "approval"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "approve" on talosmachines/approval`},
		{`it needs the "approve" verb on resource "talosmachines", subresource "privileged-approval"`,
			`The ichor:admin group (ClusterRole ichor-admin) holds "approve" on talosmachines/privileged-approval`},
		{`it needs the "start" verb on resource "talosoperations", subresource "reboot"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "start" on talosoperations/reboot`},
		{`it needs the "start" verb on resource "talosoperations", subresource "node-reset"`,
			`The ichor:admin group (ClusterRole ichor-admin) holds "start" on talosoperations/node-reset`},
		{`talosoperations.ichor.dev "x" is forbidden: User "alice" cannot create resource "talosoperations/start" in API group "ichor.dev" in the namespace "demo"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "create" on talosoperations/start`},
		{`User "alice" cannot get resource "talosmachines" in API group "ichor.dev"`,
			`The ichor:viewer group (ClusterRole ichor-viewer) holds "get" on talosmachines`},
		{`it needs the "download" verb on resource "talosclusters", subresource "talosconfig-reader"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "download" on talosclusters/talosconfig-reader`},
		{`it needs the "update" verb on resource "talosclusters", subresource "security-downgrade" (admins hold it; operators may only turn hardening on)`,
			`The ichor:admin group (ClusterRole ichor-admin) holds "update" on talosclusters/security-downgrade`},
		{`it needs the "escalate" verb on resource "talosclusters"`, `No Ichor role holds "escalate" on talosclusters`},
		{`something else entirely`, ``},
	} {
		if got := holderHint(tc.msg); (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s\n got %q\nwant %q", tc.msg, got, tc.want)
		}
	}
}

// TestSealRoundTrip: what init seals opens with its passphrase only; a
// wrong one says so; an uncommitted seal leaves nothing, and a committed
// one is not replaced without overwrite. It seals at age's default work
// factor, as init did before it was raised: such bundles still open.
func TestSealRoundTrip(t *testing.T) {
	sealAtOldWorkFactor(t)
	dir := filepath.Join(t.TempDir(), "clusters", "demo")
	want := &sealed{Cluster: "demo", Namespace: "ns", Endpoint: "https://127.0.0.1:6443", Bundle: "cluster:\n  id: x\n"}
	_, abort, err := seal(dir, want, "correct horse battery", false)
	if err != nil {
		t.Fatal(err)
	}
	abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("an aborted seal left %v", entries)
	}
	commit, _, err := seal(dir, want, "correct horse battery", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := seal(dir, want, "another passphrase", false); err == nil || !strings.Contains(err.Error(), "--force replaces it") {
		t.Errorf("a second seal: %v", err)
	}
	if _, err := unseal(dir, "not the passphrase"); err == nil || !strings.Contains(err.Error(), "wrong passphrase") {
		t.Errorf("wrong passphrase: %v", err)
	}
	got, err := unseal(dir, "correct horse battery")
	if err != nil || *got != *want {
		t.Fatalf("unsealed %+v, %v", got, err)
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode())
	}
}

// TestStatus: a cluster as a tree, with its conditions that are not True,
// its machines, its operations in flight and the recent warnings about
// them, and nothing of another cluster.
func TestStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ns := "demo"
	objs := []runtime.Object{
		&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
			Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
				Backup: &v1alpha1.ClusterBackup{Schedule: "0 3 * * *", TimeZone: "Europe/Paris"}},
			Status: v1alpha1.TalosClusterStatus{Phase: "Ready", Machines: v1alpha1.MachineCounts{Total: 2, Ready: 1},
				Backup: &v1alpha1.ClusterBackupStatus{LastSuccessfulBackup: "demo-20261204-0200", LastSuccessfulTime: &metav1.Time{Time: now.Add(-9 * time.Hour)}},
				Conditions: []metav1.Condition{
					{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"},
					{Type: "NodesReady", Status: metav1.ConditionFalse, Reason: "NodesNotReady", Message: "1 of 2 machines have a Ready Node"},
				}}},
		&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: ns},
			Spec:   v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: v1alpha1.MachineRoleControlPlane, Address: "10.0.0.11:50000"},
			Status: v1alpha1.TalosMachineStatus{Phase: "Ready", NodeName: "cp-1", TalosVersion: "v1.13.0"}},
		&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "other-1", Namespace: ns},
			Spec: v1alpha1.TalosMachineSpec{ClusterName: "other", Role: v1alpha1.MachineRoleWorker, Address: "10.0.9.9:50000"}},
		&v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "upgrade", Namespace: ns},
			Spec: v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade},
			Status: v1alpha1.TalosOperationStatus{Phase: v1alpha1.OperationRunning, Steps: []v1alpha1.OperationStep{
				{Machine: "cp-1", Phase: v1alpha1.OperationSucceeded}, {Machine: "worker-1", Phase: v1alpha1.OperationRunning}}}},
	}
	events := []runtime.Object{
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: ns}, Type: corev1.EventTypeWarning, Reason: "StepFailed",
			Message: "worker-1: did not come back", InvolvedObject: corev1.ObjectReference{Kind: "TalosOperation", Name: "upgrade"},
			LastTimestamp: metav1.NewTime(now.Add(-2 * time.Minute))},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: ns}, Type: corev1.EventTypeWarning, Reason: "Old",
			Message: "long ago", InvolvedObject: corev1.ObjectReference{Kind: "TalosCluster", Name: "demo"},
			LastTimestamp: metav1.NewTime(now.Add(-3 * time.Hour))},
	}
	var out bytes.Buffer
	if err := printStatus(context.Background(), &out, ichorfake.NewClientset(objs...), kubefake.NewClientset(events...), ns, []string{"demo"}, now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"demo  Ready  Talos v1.13.0  Kubernetes v1.36.0  1/2 machines ready",
		"├─ Conditions not True\n│  └─ NodesReady=False NodesNotReady: 1 of 2 machines have a Ready Node",
		"cp-1             controlplane Ready            10.0.0.11:50000        cp-1             v1.13.0",
		"upgrade                  talos-upgrade      Running   1/2  worker-1",
		"├─ Backups\n│  ├─ schedule \"0 3 * * *\" (Europe/Paris)\n│  └─ last success demo-20261204-0200, 9h ago",
		"└─ Warnings (last hour)\n   └─ 2m ago  TalosOperation/upgrade  StepFailed: worker-1: did not come back",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "other-1") || strings.Contains(got, "long ago") {
		t.Errorf("status shows another cluster's machine or an old warning:\n%s", got)
	}
}
