package reclaim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos/talostest"
)

const (
	ns      = "team"
	address = "10.9.0.7:50000"
)

var now = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// fixture is a started reclaim of an unmanaged node, the node, and a
// controller that may be stopped before any of its status writes.
type fixture struct {
	t         *testing.T
	client    client.Client
	dialer    *talostest.Dialer
	r         *Reconciler
	writes    int // status writes of the reclaim so far
	failWrite int // the write that "crashes", 0 for none
}

func talosconfig(t *testing.T) []byte {
	t.Helper()
	ca, err := secrets.NewTalosCA(now)
	if err != nil {
		t.Fatal(err)
	}
	pem := x509.NewCertificateAndKeyFromCertificateAuthority(ca)
	cert, err := secrets.NewAdminCertificateAndKey(now, pem, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := clientconfig.NewConfig("old", []string{address}, pem.Crt, cert).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newFixture(t *testing.T, secretType corev1.SecretType) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	started := metav1.NewTime(now)
	objs := []client.Object{
		&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns, UID: "secret-uid"}, Type: secretType,
			Data: map[string][]byte{"talosconfig": talosconfig(t)}},
		&v1alpha1.MachineReclaim{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-6", Namespace: ns, Generation: 1},
			Spec: v1alpha1.MachineReclaimSpec{ClusterName: "prod", Role: v1alpha1.MachineRoleWorker, Wipe: v1alpha1.WipeModeAll,
				Unmanaged: &v1alpha1.UnmanagedMachine{Address: address, TalosconfigSecretRef: v1alpha1.SecretKeySelector{Name: "old", Key: "talosconfig"}}},
			Status: v1alpha1.MachineReclaimStatus{Phase: v1alpha1.ReclaimPending, ReclaimedBy: "carol", StartedAt: &started},
		},
	}
	f := &fixture{t: t, dialer: &talostest.Dialer{Nodes: map[string]*talostest.Node{
		address: {UUID: "old-node", Installed: true, Stage: "running", Config: []byte("version: v1alpha1\nmachine:\n  type: " + machine.TypeWorker.String() + "\n")},
	}}}
	f.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosMachine{}, &v1alpha1.MachineReclaim{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if _, ok := obj.(*v1alpha1.MachineReclaim); ok && sub == "status" {
					f.writes++
					if f.writes == f.failWrite {
						return errors.New("injected: the controller stopped before this write")
					}
				}
				if m, ok := obj.(*v1alpha1.TalosMachine); ok && sub == "approval" {
					// The API server records who decided, from the request.
					m.Status.Approval.By = "system:serviceaccount:ichor-system:ichor-controller"
					m.Status.Approval.At = metav1.NewTime(now)
					return c.Status().Update(ctx, m)
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	f.r = &Reconciler{Client: f.client, Secrets: f.client, Dialer: f.dialer, Recorder: events.NewFakeRecorder(1000),
		Options: Options{}.withDefaults(), Now: func() time.Time { return now }}
	return f
}

func (f *fixture) reclaim() *v1alpha1.MachineReclaim {
	f.t.Helper()
	var r v1alpha1.MachineReclaim
	if err := f.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "worker-6"}, &r); err != nil {
		f.t.Fatal(err)
	}
	return &r
}

// world moves what is not the reclaim controller's on by one tick: a node
// that resets comes back in maintenance mode; the intake pins a new
// machine's certificate; an approved machine becomes Ready.
func (f *fixture) world() {
	ctx := context.Background()
	if n := f.dialer.Nodes[address]; n.Stage == "resetting" {
		n.Stage, n.Installed = "maintenance", false
	}
	var m v1alpha1.TalosMachine
	if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "worker-6"}, &m); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		f.t.Fatal(err)
	}
	switch {
	case m.Status.Approval != nil:
		m.Status.Phase = v1alpha1.MachinePhaseReady
	default:
		m.Status.Phase = v1alpha1.MachinePhasePendingApproval
		m.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: "new"}
	}
	if err := f.client.Status().Update(ctx, &m); err != nil {
		f.t.Fatal(err)
	}
}

// run reconciles until the reclaim ends, the world moving between passes.
func (f *fixture) run() *v1alpha1.MachineReclaim {
	f.t.Helper()
	for range 40 {
		_, _ = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "worker-6"}})
		if r := f.reclaim(); r.Status.Phase == v1alpha1.ReclaimSucceeded || r.Status.Phase == v1alpha1.ReclaimFailed {
			// One more pass, as a requeue would: an end whose cleanup a
			// stop interrupted finishes it.
			_, _ = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "worker-6"}})
			return f.reclaim()
		}
		f.world()
	}
	f.t.Fatalf("the reclaim never ended: %+v", f.reclaim().Status)
	return nil
}

func (f *fixture) secretGone() bool {
	err := f.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "old"}, &corev1.Secret{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// A reset and add whose controller stops before any one of its status
// writes still resets the node exactly once, deletes the talosconfig, and
// approves and finishes the new machine.
func TestUnmanagedReclaimSurvivesAStopAtEveryWrite(t *testing.T) {
	clean := newFixture(t, v1alpha1.SecretTypeTalosconfig)
	if r := clean.run(); r.Status.Phase != v1alpha1.ReclaimSucceeded {
		t.Fatalf("without a stop: %+v", r.Status)
	}
	total := clean.writes
	if total < 4 {
		t.Fatalf("only %d status writes", total)
	}
	for i := 1; i <= total; i++ {
		f := newFixture(t, v1alpha1.SecretTypeTalosconfig)
		f.failWrite = i
		r := f.run()
		if r.Status.Phase != v1alpha1.ReclaimSucceeded || r.Status.ResetAt == nil || r.Status.MachineName != "worker-6" {
			t.Errorf("stopped before write %d: %+v", i, r.Status)
		}
		if calls := f.dialer.Nodes[address].Calls; !slices.Equal(calls, []string{"reset graceful=true"}) {
			t.Errorf("stopped before write %d: the node was asked %v, want one graceful reset", i, calls)
		}
		if !f.secretGone() {
			t.Errorf("stopped before write %d: the talosconfig Secret is still there", i)
		}
		var m v1alpha1.TalosMachine
		if err := f.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "worker-6"}, &m); err != nil {
			t.Fatal(err)
		}
		if a := m.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.Reason != "reclaimed by MachineReclaim worker-6, started by carol" ||
			m.Labels[v1alpha1.LabelMachineReclaim] != "worker-6" || m.Spec.Address != address || m.Spec.ClusterName != "prod" {
			t.Errorf("stopped before write %d: new machine %+v %+v", i, m.ObjectMeta.Labels, m.Status.Approval)
		}
	}
}

// A node that stops answering once the reset was asked for (its answer lost
// with a stop) is waited for, not failed, and not asked twice.
func TestUnmanagedReclaimWaitsForANodeThatStoppedAnswering(t *testing.T) {
	f := newFixture(t, v1alpha1.SecretTypeTalosconfig)
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "worker-6"}}
	if _, err := f.r.Reconcile(context.Background(), req); err != nil { // begin: the node answers
		t.Fatal(err)
	}
	f.dialer.Nodes[address].Stage = "off" // resetting, or rebooting: no answer
	for range 3 {
		if _, err := f.r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	r := f.reclaim()
	c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionProgressing)
	if r.Status.Phase != v1alpha1.ReclaimResetting || c == nil || !strings.Contains(c.Message, "does not answer; waiting") {
		t.Fatalf("status %+v", r.Status)
	}
	if f.secretGone() {
		t.Errorf("the talosconfig went before any reset was accepted")
	}
	// Past the reset timeout, it fails, and the talosconfig goes.
	f.r.Now = func() time.Time { return now.Add(f.r.Options.ResetTimeout + time.Minute) }
	if _, err := f.r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if r := f.reclaim(); r.Status.Phase != v1alpha1.ReclaimFailed || !f.secretGone() {
		t.Errorf("after the timeout: %+v, Secret gone %v", r.Status, f.secretGone())
	}
}

// A Secret not of type ichor.dev/talosconfig is neither used nor deleted,
// and nothing is reset.
func TestUnmanagedReclaimRefusesASecretNotHandedOver(t *testing.T) {
	f := newFixture(t, corev1.SecretTypeOpaque)
	r := f.run()
	c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionSucceeded)
	if r.Status.Phase != v1alpha1.ReclaimFailed || c == nil || c.Reason != v1alpha1.ReclaimReasonBadTalosconfig {
		t.Fatalf("status %+v", r.Status)
	}
	if f.secretGone() || len(f.dialer.Nodes[address].Calls) != 0 {
		t.Errorf("Secret gone %v, node asked %v", f.secretGone(), f.dialer.Nodes[address].Calls)
	}
}

// A machine of the reclaim's name that someone else made meanwhile, with the
// reclaim's label but another spec, is not approved on the reclaim's behalf.
func TestReclaimApprovesOnlyTheMachineItMakes(t *testing.T) {
	f := newFixture(t, v1alpha1.SecretTypeTalosconfig)
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "worker-6"}}
	for f.reclaim().Status.Phase != v1alpha1.ReclaimJoining {
		if _, err := f.r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		f.world()
	}
	impostor := &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-6", Namespace: ns, Labels: map[string]string{v1alpha1.LabelMachineReclaim: "worker-6"}},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: "prod", Role: v1alpha1.MachineRoleControlPlane, Address: address},
	}
	if err := f.client.Create(context.Background(), impostor); err != nil {
		t.Fatal(err)
	}
	r := f.run()
	c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionSucceeded)
	if r.Status.Phase != v1alpha1.ReclaimFailed || c == nil || c.Reason != v1alpha1.ReclaimReasonCannotAdd {
		t.Fatalf("status %+v", r.Status)
	}
	var m v1alpha1.TalosMachine
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(impostor), &m); err != nil {
		t.Fatal(err)
	}
	if m.Status.Approval != nil {
		t.Errorf("the machine someone else made was approved: %+v", m.Status.Approval)
	}
}
