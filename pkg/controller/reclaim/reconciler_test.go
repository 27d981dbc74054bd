package reclaim

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talos/talostest"
)

const (
	ns      = "team"
	address = "10.9.0.7:50000"
)

var now = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// fixture is a started reclaim of a node (unmanaged, or of machineRef), the
// node, and a controller that may be stopped before any of its status writes.
type fixture struct {
	t         *testing.T
	client    client.Client
	dialer    *certDialer
	r         *Reconciler
	recorder  *eventstest.Recorder
	writes    int // status writes of the reclaim so far
	failWrite int // the write that "crashes", 0 for none
	// approvedByController counts the approvals ichor-controller wrote.
	approvedByController int
	// admin approves a control plane that waits for an admin, as a person would.
	admin bool
	// managed: the reclaim is of a TalosMachine, whose deletion resets the node.
	managed bool
}

// The nodes of the fixtures: the one reclaimed, and one that is another.
const (
	nodeUUID     = "old-node"
	impostorUUID = "impostor"
)

// fingerprint is a valid SPKI fingerprint, one per name.
func fingerprint(name string) string {
	sum := sha256.Sum256([]byte(name))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// certDialer is talostest's, with the maintenance certificate each address
// presents: a pinned session meets another as a real one does.
type certDialer struct {
	*talostest.Dialer
	certs map[string]string
}

func (d *certDialer) Maintenance(ctx context.Context, address string, pin talos.Pin) (talos.Node, error) {
	presented := d.certs[address]
	if !pin.Observing() {
		want, err := talos.Pinned(presented)
		if err != nil || want.String() != pin.String() {
			return nil, &talos.FingerprintMismatchError{Address: address, Pinned: pin.String(), Presented: presented}
		}
	}
	n, err := d.Dialer.Maintenance(ctx, address, pin)
	if err != nil {
		return nil, err
	}
	return certSession{Node: n, fingerprint: presented}, nil
}

type certSession struct {
	talos.Node
	fingerprint string
}

func (s certSession) Fingerprint() string { return s.fingerprint }

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
	return newFixtureFor(t, secretType, nil)
}

// newFixtureFor is newFixture with the reclaim (and the objects besides it)
// changed by change.
func newFixtureFor(t *testing.T, secretType corev1.SecretType, change func(*v1alpha1.MachineReclaim) []client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	started := metav1.NewTime(now)
	rc := &v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-6", Namespace: ns, Generation: 1},
		Spec: v1alpha1.MachineReclaimSpec{ClusterName: "prod", Role: v1alpha1.MachineRoleWorker, Wipe: v1alpha1.WipeModeAll,
			Unmanaged: &v1alpha1.UnmanagedMachine{Address: address, TalosconfigSecretRef: v1alpha1.SecretKeySelector{Name: "old", Key: "talosconfig"}}},
		Status: v1alpha1.MachineReclaimStatus{Phase: v1alpha1.ReclaimPending, ReclaimedBy: "carol", StartedAt: &started},
	}
	objs := []client.Object{
		&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns, UID: "secret-uid"}, Type: secretType,
			Data: map[string][]byte{"talosconfig": talosconfig(t)}},
		rc,
	}
	if change != nil {
		objs = append(objs, change(rc)...)
	}
	f := &fixture{t: t, recorder: eventstest.New(t, 1000), dialer: &certDialer{
		Dialer: &talostest.Dialer{Nodes: map[string]*talostest.Node{
			address: {UUID: nodeUUID, Installed: true, Stage: "running", Config: []byte("version: v1alpha1\nmachine:\n  type: " + machine.TypeWorker.String() + "\n")},
		}},
		certs: map[string]string{address: fingerprint(nodeUUID)},
	}}
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
					// The API server records who decided, from the request:
					// the controller, unless a test's person wrote it.
					if m.Status.Approval.By == "" {
						m.Status.Approval.By = controllerUser
						if m.Status.Approval.Decision == v1alpha1.ApprovalApproved {
							f.approvedByController++
						}
					}
					m.Status.Approval.At = metav1.NewTime(now)
					return c.Status().Update(ctx, m)
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	f.managed = rc.Spec.MachineRef != nil
	f.r = &Reconciler{Client: f.client, Secrets: f.client, Dialer: f.dialer, Recorder: f.recorder,
		Options: Options{}.withDefaults(), Now: func() time.Time { return now }}
	return f
}

const controllerUser = "system:serviceaccount:ichor-system:ichor-controller"

// managed makes the reclaim one of TalosMachine away/worker-6, whose node is
// the fixture's, with uuid on record.
func managed(uuid string) func(*v1alpha1.MachineReclaim) []client.Object {
	return func(rc *v1alpha1.MachineReclaim) []client.Object {
		rc.Spec.Unmanaged, rc.Spec.Wipe = nil, ""
		rc.Spec.MachineRef = &v1alpha1.MachineReference{Namespace: "away", Name: "worker-6"}
		old := &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-6", Namespace: "away", UID: "old-uid"},
			Spec:       v1alpha1.TalosMachineSpec{ClusterName: "elsewhere", Role: v1alpha1.MachineRoleWorker, Address: address},
		}
		if uuid != "" {
			old.Status.Hardware = &v1alpha1.HardwareStatus{UUID: uuid}
		}
		return []client.Object{old}
	}
}

func (f *fixture) reclaim() *v1alpha1.MachineReclaim {
	f.t.Helper()
	var r v1alpha1.MachineReclaim
	if err := f.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "worker-6"}, &r); err != nil {
		f.t.Fatal(err)
	}
	return &r
}

// machine is the new TalosMachine, or nil before it exists.
func (f *fixture) machine() *v1alpha1.TalosMachine {
	f.t.Helper()
	var m v1alpha1.TalosMachine
	err := f.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "worker-6"}, &m)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return &m
}

// world moves what is not the reclaim controller's on by one tick: a node
// that resets comes back in maintenance mode (a managed one once its old
// machine is gone, as its finalizer resets it); intake contacts the new
// machine, pinning what answers first (or only the expected certificate);
// an approved machine is configured, over a session pinned to its
// certificate, and becomes Ready; with admin set, an admin approves a
// control plane the reclaim says waits for one.
func (f *fixture) world() {
	f.t.Helper()
	ctx := context.Background()
	if n := f.dialer.Nodes[address]; n.Stage == "resetting" {
		n.Stage, n.Installed = "maintenance", false
	}
	if err := f.client.Get(ctx, client.ObjectKey{Namespace: "away", Name: "worker-6"}, &v1alpha1.TalosMachine{}); f.managed && apierrors.IsNotFound(err) {
		if n := f.dialer.Nodes[address]; n.UUID == nodeUUID && n.Installed {
			n.Calls = append(n.Calls, "reset by its old machine's finalizer")
			n.Stage, n.Installed = "maintenance", false
		}
	}
	m := f.machine()
	if m == nil || m.Status.Phase == v1alpha1.MachinePhaseReady {
		return
	}
	switch a := m.Status.Approval; {
	case a != nil && a.Decision == v1alpha1.ApprovalApproved:
		pin, err := talos.Pinned(m.Status.Maintenance.CertificateFingerprint)
		if err != nil {
			f.t.Fatal(err)
		}
		node, err := f.dialer.Maintenance(ctx, m.Spec.Address, pin)
		if err != nil {
			return // nothing is sent to another certificate
		}
		if _, err := node.ApplyConfiguration(ctx, []byte("config"), talos.ApplyNoReboot); err != nil {
			f.t.Fatal(err)
		}
		m.Status.Phase = v1alpha1.MachinePhaseReady
	case a == nil && f.admin && m.Spec.Role == v1alpha1.MachineRoleControlPlane:
		if c := meta.FindStatusCondition(f.reclaim().Status.Conditions, v1alpha1.ReclaimConditionProgressing); c != nil && c.Reason == v1alpha1.ReclaimReasonWaitingForApproval {
			m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "alice", Reason: "checked its console"}
			if err := f.client.SubResource("approval").Update(ctx, m); err != nil {
				f.t.Fatal(err)
			}
			return
		}
		fallthrough
	default:
		pinned := ""
		if m.Status.Maintenance != nil {
			pinned = m.Status.Maintenance.CertificateFingerprint
		}
		intake.Record(&m.Status, m.Generation, intake.Contact(ctx, f.dialer, m.Spec.Address, pinned, m.Spec.ExpectedFingerprint), metav1.NewTime(now))
	}
	if err := f.client.Status().Update(ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// pass reconciles the reclaim once.
func (f *fixture) pass() {
	f.t.Helper()
	_, _ = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "worker-6"}})
}

// run reconciles until the reclaim ends, the world moving between passes.
func (f *fixture) run() *v1alpha1.MachineReclaim {
	f.t.Helper()
	for range 40 {
		f.pass()
		if r := f.reclaim(); r.Status.Phase == v1alpha1.ReclaimSucceeded || r.Status.Phase == v1alpha1.ReclaimFailed {
			// One more pass, as a requeue would: an end whose cleanup a
			// stop interrupted finishes it.
			f.pass()
			return f.reclaim()
		}
		f.world()
	}
	f.t.Fatalf("the reclaim never ended: %+v", f.reclaim().Status)
	return nil
}

// runFor reconciles n times, the world moving between passes.
func (f *fixture) runFor(n int) *v1alpha1.MachineReclaim {
	f.t.Helper()
	for range n {
		f.pass()
		f.world()
	}
	return f.reclaim()
}

// events are the Events recorded so far.
func (f *fixture) events() []string {
	var got []string
	for {
		select {
		case e := <-f.recorder.Events:
			got = append(got, e)
		default:
			return got
		}
	}
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
// finishes the new machine: a worker approved on the reclaim's behalf, a
// control plane by an admin only.
func TestUnmanagedReclaimSurvivesAStopAtEveryWrite(t *testing.T) {
	for _, role := range []v1alpha1.MachineRole{v1alpha1.MachineRoleWorker, v1alpha1.MachineRoleControlPlane} {
		t.Run(string(role), func(t *testing.T) {
			setup := func(failWrite int) *fixture {
				f := newFixtureFor(t, v1alpha1.SecretTypeTalosconfig, func(rc *v1alpha1.MachineReclaim) []client.Object {
					rc.Spec.Role = role
					return nil
				})
				f.admin, f.failWrite = true, failWrite
				return f
			}
			clean := setup(0)
			if r := clean.run(); r.Status.Phase != v1alpha1.ReclaimSucceeded {
				t.Fatalf("without a stop: %+v", r.Status)
			}
			total := clean.writes
			if total < 4 {
				t.Fatalf("only %d status writes", total)
			}
			for i := 1; i <= total; i++ {
				f := setup(i)
				r := f.run()
				if r.Status.Phase != v1alpha1.ReclaimSucceeded || r.Status.ResetAt == nil || r.Status.MachineName != "worker-6" || r.Status.SystemUUID != nodeUUID {
					t.Errorf("stopped before write %d: %+v", i, r.Status)
				}
				if calls := f.dialer.Nodes[address].Calls; !slices.Equal(calls, []string{"reset graceful=true", "maintenance-apply"}) {
					t.Errorf("stopped before write %d: the node was asked %v, want one graceful reset, then its config", i, calls)
				}
				if !f.secretGone() {
					t.Errorf("stopped before write %d: the talosconfig Secret is still there", i)
				}
				m := f.machine()
				if m.Labels[v1alpha1.LabelMachineReclaim] != "worker-6" || m.Spec.Address != address || m.Spec.ClusterName != "prod" || m.Spec.Role != role {
					t.Errorf("stopped before write %d: new machine %+v %+v", i, m.ObjectMeta.Labels, m.Spec)
				}
				a := m.Status.Approval
				switch {
				case a == nil || a.Decision != v1alpha1.ApprovalApproved:
					t.Errorf("stopped before write %d: approval %+v", i, a)
				case role == v1alpha1.MachineRoleControlPlane && (a.By != "alice" || f.approvedByController != 0):
					t.Errorf("stopped before write %d: a control plane approved by %s (the controller %d times)", i, a.By, f.approvedByController)
				case role == v1alpha1.MachineRoleWorker &&
					!strings.HasPrefix(a.Reason, "reclaimed by MachineReclaim worker-6, started by carol: the node reset (system UUID old-node, certificate "):
					t.Errorf("stopped before write %d: approval %+v", i, a)
				}
			}
		})
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

// impostor takes the reclaim's address: another node, in maintenance mode,
// presenting its own certificate and reporting uuid. It returns the node.
func (f *fixture) impostor(uuid string) *talostest.Node {
	n := &talostest.Node{UUID: uuid, Stage: "maintenance"}
	f.dialer.Nodes[address] = n
	f.dialer.certs[address] = fingerprint(impostorUUID)
	return n
}

// untilPhase reconciles, the world moving between passes, until the
// reclaim reaches phase.
func (f *fixture) untilPhase(phase v1alpha1.ReclaimPhase) {
	f.t.Helper()
	for range 20 {
		if f.reclaim().Status.Phase == phase {
			return
		}
		f.pass()
		f.world()
	}
	f.t.Fatalf("the reclaim never reached %s: %+v", phase, f.reclaim().Status)
}

func expectCondition(t *testing.T, r *v1alpha1.MachineReclaim, condType, reason, text string) {
	t.Helper()
	c := meta.FindStatusCondition(r.Status.Conditions, condType)
	if c == nil || c.Reason != reason || !strings.Contains(c.Message, text) {
		t.Errorf("condition %s = %+v, want reason %s saying %q", condType, c, reason, text)
	}
}

// The attack: once the node is reset, another node answers at its address
// first, and intake pins its certificate. It reports another system UUID,
// so it is rejected, never approved, and nothing is sent to it: worker or
// control plane, managed or unmanaged.
func TestReclaimNeverApprovesAnotherNodeThatAnswersFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.MachineReclaim) []client.Object
	}{
		{"unmanaged worker", nil},
		{"unmanaged control plane", func(rc *v1alpha1.MachineReclaim) []client.Object {
			rc.Spec.Role = v1alpha1.MachineRoleControlPlane
			return nil
		}},
		{"managed worker", managed(nodeUUID)},
		{"managed control plane", func(rc *v1alpha1.MachineReclaim) []client.Object {
			objs := managed(nodeUUID)(rc)
			rc.Spec.Role = v1alpha1.MachineRoleControlPlane
			return objs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureFor(t, v1alpha1.SecretTypeTalosconfig, tc.change)
			f.admin = true // an admin approves a control plane the reclaim vouches for
			f.untilPhase(v1alpha1.ReclaimJoining)
			impostor := f.impostor(impostorUUID)
			r := f.run()
			if r.Status.Phase != v1alpha1.ReclaimFailed {
				t.Fatalf("status %+v", r.Status)
			}
			expectCondition(t, r, v1alpha1.ReclaimConditionSucceeded, v1alpha1.ReclaimReasonNotThisMachine,
				`reports system UUID "impostor", not old-node, the one read before the reset: it is another machine; TalosMachine worker-6 is rejected`)
			m := f.machine()
			if a := m.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalRejected || a.By != controllerUser ||
				m.Status.Maintenance.CertificateFingerprint != fingerprint(impostorUUID) {
				t.Errorf("the other node's machine: pinned %+v, decision %+v", m.Status.Maintenance, a)
			}
			if f.approvedByController != 0 || len(impostor.Calls) != 0 {
				t.Errorf("the controller approved %d times; the other node was asked %v", f.approvedByController, impostor.Calls)
			}
			// Passes after the end change nothing.
			f.runFor(3)
			if m := f.machine(); m.Status.Approval.Decision != v1alpha1.ApprovalRejected || len(impostor.Calls) != 0 {
				t.Errorf("after the end: %+v, the other node asked %v", m.Status.Approval, impostor.Calls)
			}
		})
	}
}

// Another node in maintenance mode that answers at the address while the
// reset node is away is not taken for it: the reclaim waits, creating no
// machine, until the node reset answers, and then goes on.
func TestUnmanagedReclaimWaitsForTheNodeResetWhileAnotherAnswers(t *testing.T) {
	f := newFixture(t, v1alpha1.SecretTypeTalosconfig)
	f.pass() // begin
	f.pass() // reset
	node := f.dialer.Nodes[address]
	if !slices.Equal(node.Calls, []string{"reset graceful=true"}) {
		t.Fatalf("the node was asked %v", node.Calls)
	}
	impostor := f.impostor(impostorUUID)
	r := f.runFor(5)
	if r.Status.Phase != v1alpha1.ReclaimResetting || f.machine() != nil {
		t.Fatalf("with another node answering: %+v, machine %v", r.Status, f.machine())
	}
	expectCondition(t, r, v1alpha1.ReclaimConditionProgressing, v1alpha1.ReclaimReasonNotThisMachine,
		`reports system UUID "impostor", not old-node, the one read before the reset; nothing is sent to it`)
	warnings := 0
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning NotThisMachine") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d NotThisMachine Warnings over 5 passes, want 1", warnings)
	}
	// The node reset comes back.
	node.Stage, node.Installed = "maintenance", false
	f.dialer.Nodes[address], f.dialer.certs[address] = node, fingerprint(nodeUUID)
	if r := f.run(); r.Status.Phase != v1alpha1.ReclaimSucceeded || len(impostor.Calls) != 0 {
		t.Errorf("once the node reset answers: %+v; the other node was asked %v", r.Status, impostor.Calls)
	}
}

// With spec.expectedFingerprint, a node that even reports the right system
// UUID is not pinned, nor approved, unless it presents that certificate.
func TestReclaimWithAnExpectedFingerprintPinsOnlyThatCertificate(t *testing.T) {
	f := newFixtureFor(t, v1alpha1.SecretTypeTalosconfig, func(rc *v1alpha1.MachineReclaim) []client.Object {
		rc.Spec.ExpectedFingerprint = fingerprint(nodeUUID)
		return nil
	})
	f.untilPhase(v1alpha1.ReclaimJoining)
	node := f.dialer.Nodes[address]
	impostor := f.impostor(nodeUUID) // it says it is the node reset
	r := f.runFor(5)
	m := f.machine()
	if r.Status.Phase != v1alpha1.ReclaimJoining || m == nil || m.Status.Maintenance != nil || m.Status.Approval != nil ||
		m.Spec.ExpectedFingerprint != fingerprint(nodeUUID) {
		t.Fatalf("with another certificate answering: %+v; machine %+v", r.Status, m)
	}
	expectCondition(t, r, v1alpha1.ReclaimConditionProgressing, v1alpha1.ReclaimReasonNotThisMachine,
		"does not present spec.expectedFingerprint "+fingerprint(nodeUUID)+"; nothing is sent to it")
	f.dialer.Nodes[address], f.dialer.certs[address] = node, fingerprint(nodeUUID)
	r = f.run()
	if r.Status.Phase != v1alpha1.ReclaimSucceeded || len(impostor.Calls) != 0 {
		t.Fatalf("once the node reset answers: %+v; the other node was asked %v", r.Status, impostor.Calls)
	}
	if a := f.machine().Status.Approval; a == nil || !strings.Contains(a.Reason, "system UUID old-node, the expected certificate "+fingerprint(nodeUUID)) {
		t.Errorf("approval %+v", a)
	}
}

// Another node of the old cluster (the talosconfig opens them all) that
// answers at the address when the reset is sent is not reset.
func TestUnmanagedReclaimResetsOnlyTheNodeItChecked(t *testing.T) {
	f := newFixture(t, v1alpha1.SecretTypeTalosconfig)
	f.pass() // begin: the node reports old-node
	other := &talostest.Node{UUID: impostorUUID, Installed: true, Stage: "running"}
	f.dialer.Nodes[address] = other
	r := f.run()
	expectCondition(t, r, v1alpha1.ReclaimConditionSucceeded, v1alpha1.ReclaimReasonNotThisMachine,
		`reports system UUID "impostor", not old-node, the one read when the reclaim began; nothing was reset`)
	if len(other.Calls) != 0 || f.machine() != nil || !f.secretGone() {
		t.Errorf("the other node was asked %v; machine %v; Secret gone %v", other.Calls, f.machine(), f.secretGone())
	}
}

// A control plane is never approved by the controller: the reclaim says it
// waits for an admin, once in an Event, and goes on once one approved.
func TestControlPlaneReclaimWaitsForAnAdmin(t *testing.T) {
	f := newFixtureFor(t, v1alpha1.SecretTypeTalosconfig, func(rc *v1alpha1.MachineReclaim) []client.Object {
		rc.Spec.Role = v1alpha1.MachineRoleControlPlane
		return nil
	})
	r := f.runFor(15)
	m := f.machine()
	if r.Status.Phase != v1alpha1.ReclaimJoining || m == nil || m.Status.Approval != nil || f.approvedByController != 0 {
		t.Fatalf("after 15 passes: %+v; machine %+v; approved by the controller %d times", r.Status, m, f.approvedByController)
	}
	expectCondition(t, r, v1alpha1.ReclaimConditionProgressing, v1alpha1.ReclaimReasonWaitingForApproval,
		"the node at 10.9.0.7:50000 is the one reset (system UUID old-node, certificate "+fingerprint(nodeUUID)+
			" pinned), but a control plane receives every CA key of TalosCluster prod: TalosMachine worker-6 waits for an admin's approval (ichor -n team approve worker-6)")
	waiting := 0
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Normal WaitingForApproval") {
			waiting++
		}
	}
	if waiting != 1 {
		t.Errorf("%d WaitingForApproval Events, want 1", waiting)
	}
	f.admin = true
	if r := f.run(); r.Status.Phase != v1alpha1.ReclaimSucceeded || f.approvedByController != 0 || f.machine().Status.Approval.By != "alice" {
		t.Fatalf("once an admin approved: %+v; approval %+v", r.Status, f.machine().Status.Approval)
	}
	if !slices.ContainsFunc(f.events(), func(e string) bool { return strings.Contains(e, "alice approved TalosMachine worker-6") }) {
		t.Errorf("no Event says alice approved")
	}
}

// Before anything is reset, the node must have a system UUID to be
// recognised by afterwards, unless spec.expectedFingerprint names its
// certificate; a managed machine is reclaimed as an unmanaged one is.
func TestReclaimNeedsAnIdentityBeforeTheReset(t *testing.T) {
	noUUID := func(*v1alpha1.MachineReclaim) []client.Object { return nil }
	for _, tc := range []struct {
		name     string
		change   func(*v1alpha1.MachineReclaim) []client.Object
		nodeUUID string
		want     v1alpha1.ReclaimPhase
		reason   string
	}{
		{"managed", managed(nodeUUID), nodeUUID, v1alpha1.ReclaimSucceeded, v1alpha1.ReclaimReasonJoined},
		{"managed, no UUID on record", managed(""), nodeUUID, v1alpha1.ReclaimFailed, v1alpha1.ReclaimReasonNoSystemUUID},
		{"unmanaged, no UUID reported", noUUID, "", v1alpha1.ReclaimFailed, v1alpha1.ReclaimReasonNoSystemUUID},
		{"unmanaged, no UUID but the expected certificate", func(rc *v1alpha1.MachineReclaim) []client.Object {
			rc.Spec.ExpectedFingerprint = fingerprint(nodeUUID)
			return nil
		}, "", v1alpha1.ReclaimSucceeded, v1alpha1.ReclaimReasonJoined},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureFor(t, v1alpha1.SecretTypeTalosconfig, tc.change)
			f.dialer.Nodes[address].UUID = tc.nodeUUID
			r := f.run()
			expectCondition(t, r, v1alpha1.ReclaimConditionSucceeded, tc.reason, "")
			if r.Status.Phase != tc.want {
				t.Fatalf("status %+v", r.Status)
			}
			calls := f.dialer.Nodes[address].Calls
			if tc.want == v1alpha1.ReclaimFailed {
				err := f.client.Get(context.Background(), client.ObjectKey{Namespace: "away", Name: "worker-6"}, &v1alpha1.TalosMachine{})
				if len(calls) != 0 || (f.managed && err != nil) {
					t.Errorf("refused, yet the node was asked %v; the old machine: %v", calls, err)
				}
				return
			}
			if f.approvedByController != 1 || !slices.Contains(calls, "maintenance-apply") {
				t.Errorf("approved %d times; the node was asked %v", f.approvedByController, calls)
			}
		})
	}
}
