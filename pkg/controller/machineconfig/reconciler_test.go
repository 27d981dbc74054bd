package machineconfig

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// The decisions of the reconciler — install or converge, a rollout step by
// its effect under the disruption budget, refusing another node behind the
// address — against a fake client and fake Talos nodes, in milliseconds.

const (
	ns          = "ns"
	fingerprint = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
)

// fixture is a cluster with its bundle and the reconciler under test.
type fixture struct {
	t      *testing.T
	client client.Client
	dialer *talostest.Dialer
	r      *Reconciler
	now    time.Time
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns, UID: "uid-demo", Generation: 1},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"}},
		Status: v1alpha1.TalosClusterStatus{Conditions: []metav1.Condition{{
			Type: v1alpha1.ClusterConditionSecretsReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ClusterReasonGenerated,
			LastTransitionTime: metav1.NewTime(now)}}},
	}
	bundle, err := secretsbundle.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(bundle)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: ns},
		Data:       map[string][]byte{secretsbundle.BundleKey: bundle},
	}
	byCluster := func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(append([]client.Object{cluster, secret}, objs...)...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}, &v1alpha1.TalosConfigPatch{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, byCluster).
		WithIndex(&v1alpha1.TalosConfigPatch{}, clusterindex.Field, byCluster).
		Build()
	f := &fixture{t: t, client: c, dialer: &talostest.Dialer{Nodes: map[string]*talostest.Node{}}, now: now}
	f.r = &Reconciler{
		Client: c, APIReader: c, Secrets: c, Dialer: f.dialer,
		Recorder: eventstest.New(t, 100), Options: Options{}.withDefaults(),
		Now: func() time.Time { return f.now },
	}
	f.r.budget = &disruption.Budget{Client: c, Reader: c, Now: f.r.Now}
	return f
}

// machine is an approved worker whose maintenance certificate was pinned
// and whose hardware reported uuid; the finalizer is there as after the
// first install (the fake client serves no finalizers subresource).
func machine(name, address, uuid string) *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1, Finalizers: []string{Finalizer}},
		Spec: v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: v1alpha1.MachineRoleWorker, Address: address,
			Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
		Status: v1alpha1.TalosMachineStatus{
			Approval:    &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "olivia"},
			Maintenance: &v1alpha1.MaintenanceStatus{CertificateFingerprint: fingerprint},
			Hardware:    &v1alpha1.HardwareStatus{UUID: uuid},
		},
	}
}

func (f *fixture) reconcile(name string) ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (f *fixture) get(name string) *v1alpha1.TalosMachine {
	f.t.Helper()
	var m v1alpha1.TalosMachine
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
		f.t.Fatal(err)
	}
	return &m
}

func (f *fixture) holder() *v1alpha1.DisruptionStatus {
	f.t.Helper()
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	return c.Status.Disruption
}

func reason(m *v1alpha1.TalosMachine, condType string) string {
	if c := meta.FindStatusCondition(m.Status.Conditions, condType); c != nil {
		return c.Reason
	}
	return ""
}

// configured is machine m of role, recorded as configured on node-<uuid>,
// and its node, running.
func configured(name, address, uuid string, role v1alpha1.MachineRole) (*v1alpha1.TalosMachine, *talostest.Node) {
	m := machine(name, address, uuid)
	m.Spec.Role = role
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "00", Effect: v1alpha1.ConfigEffectReboot, AppliedAt: metav1.Now()}
	m.Status.Phase, m.Status.NodeName = v1alpha1.MachinePhaseReady, "node-"+uuid
	return m, &talostest.Node{UUID: uuid, Installed: true, Stage: "running", Etcd: role == v1alpha1.MachineRoleControlPlane}
}

// installReady installs each machine's node from maintenance mode, boots
// the nodes, and checks that the machines are Ready.
func (f *fixture) installReady(names ...string) {
	f.t.Helper()
	for _, name := range names {
		f.reconcile(name)
	}
	f.dialer.Boot()
	for _, name := range names {
		f.reconcile(name)
		if m := f.get(name); m.Status.Phase != v1alpha1.MachinePhaseReady {
			f.t.Fatalf("%s is %s after its install", name, m.Status.Phase)
		}
	}
}

// createPatch creates a TalosConfigPatch of the whole cluster.
func (f *fixture) createPatch(name, text string) {
	f.t.Helper()
	patch := &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1},
		Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: "demo", Patch: text},
	}
	if err := f.client.Create(context.Background(), patch); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) delete(name string) {
	f.t.Helper()
	if err := f.client.Delete(context.Background(), f.get(name)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) gone(name string) bool {
	f.t.Helper()
	var m v1alpha1.TalosMachine
	err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m)
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func TestInstallOnceThenFollow(t *testing.T) {
	f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"))
	node := &talostest.Node{UUID: "uuid-1", Stage: "maintenance"}
	f.dialer.Nodes["10.5.0.11:50000"] = node

	f.reconcile("w1")
	m := f.get("w1")
	if m.Status.AppliedConfig == nil || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonInstalled ||
		m.Status.Phase != v1alpha1.MachinePhaseConfiguring {
		t.Fatalf("after the install: phase %s, applied %+v, conditions %+v", m.Status.Phase, m.Status.AppliedConfig, m.Status.Conditions)
	}
	// Still installing: followed over mutual TLS, nothing sent again, and
	// looked at again soon, at the priority it was woken with.
	res := f.reconcile("w1")
	if m := f.get("w1"); reason(m, v1alpha1.MachineConditionReady) == v1alpha1.MachineReasonRunning {
		t.Fatalf("Ready while the node installs: %+v", m.Status.Conditions)
	}
	if res.RequeueAfter == 0 || res.Priority != nil {
		t.Errorf("while installing: %+v, want a requeue at the priority it came with", res)
	}
	f.dialer.Boot()
	// Ready: the health checks that follow yield to machines an event woke.
	if res, every := f.reconcile("w1"), f.r.Options.HealthInterval; res.RequeueAfter < every || res.RequeueAfter > every+every/10 ||
		res.Priority == nil || *res.Priority != handler.LowPriority {
		t.Errorf("once Ready: %+v, want a health check after %v (up to a tenth more) at low priority", res, every)
	}
	m = f.get("w1")
	if m.Status.Phase != v1alpha1.MachinePhaseReady || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonUpToDate ||
		m.Status.NodeName != "node-uuid-1" {
		t.Fatalf("after the boot: phase %s, node %q, conditions %+v", m.Status.Phase, m.Status.NodeName, m.Status.Conditions)
	}
	f.reconcile("w1")
	if !slices.Equal(node.Calls, []string{"maintenance-apply"}) {
		t.Errorf("the node was asked %v; want one install and nothing since", node.Calls)
	}
}

// The install's status write was lost: the retry finds the node configured
// (its maintenance API gone) and records it, instead of pinning on a
// certificate mismatch forever.
func TestInstallWhoseRecordWasLost(t *testing.T) {
	f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"))
	node := &talostest.Node{UUID: "uuid-1", Stage: "maintenance"}
	f.dialer.Nodes["10.5.0.11:50000"] = node
	f.reconcile("w1")
	// Forget the record, as a crash before the write would have.
	m := f.get("w1")
	m.Status.AppliedConfig, m.Status.Phase, m.Status.Conditions = nil, "", nil
	if err := f.client.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}

	f.reconcile("w1")
	m = f.get("w1")
	if m.Status.AppliedConfig == nil || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonInstalled {
		t.Fatalf("the retry did not record the install: %+v", m.Status.Conditions)
	}
	if r := reason(m, v1alpha1.MachineConditionCertificateVerified); r != v1alpha1.MachineReasonLeftMaintenance {
		t.Errorf("CertificateVerified is %q, want %s", r, v1alpha1.MachineReasonLeftMaintenance)
	}
	if !slices.Equal(node.Calls, []string{"maintenance-apply"}) {
		t.Errorf("the node was asked %v; want the one install", node.Calls)
	}

	// A node that only refuses the pin, but is not this machine, is not taken for it.
	g := newFixture(t, machine("w2", "10.5.0.12:50000", "uuid-2"))
	g.dialer.Nodes["10.5.0.12:50000"] = &talostest.Node{UUID: "uuid-other", Installed: true, Stage: "running"}
	g.reconcile("w2")
	if m := g.get("w2"); m.Status.AppliedConfig != nil || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonCertificateMismatch {
		t.Errorf("another node behind the address: applied %+v, conditions %+v", m.Status.AppliedConfig, m.Status.Conditions)
	}
}

// A reboot-required patch rolls out one machine at a time: the first takes
// the budget and reboots, the second waits, and goes once the first is
// back and gave the budget back.
func TestRebootRolloutOneAtATime(t *testing.T) {
	f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"), machine("w2", "10.5.0.12:50000", "uuid-2"))
	nodes := map[string]*talostest.Node{"w1": {UUID: "uuid-1", Stage: "maintenance"}, "w2": {UUID: "uuid-2", Stage: "maintenance"}}
	f.dialer.Nodes["10.5.0.11:50000"], f.dialer.Nodes["10.5.0.12:50000"] = nodes["w1"], nodes["w2"]
	f.installReady("w1", "w2")
	f.createPatch("env", "machine:\n  env:\n    HTTP_PROXY: http://10.5.0.1:3128\n")
	f.now = f.now.Add(time.Minute)
	f.reconcile("w1")
	if h := f.holder(); h == nil || h.Machine != "w1" || h.Action != v1alpha1.DisruptionReboot {
		t.Fatalf("w1's reboot step holds no budget: %+v", h)
	}
	f.reconcile("w2")
	if m := f.get("w2"); reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonWaitingForRollout {
		t.Errorf("w2 while w1 reboots: %+v", m.Status.Conditions)
	}
	if got := nodes["w2"].Calls; len(got) != 1 {
		t.Fatalf("w2 was sent %v while w1 was away", got)
	}
	// A second look at w1 while it reboots sends nothing again.
	f.reconcile("w1")
	f.dialer.Boot()
	f.reconcile("w1")
	if h := f.holder(); h != nil {
		t.Fatalf("w1 is back and still holds the budget: %+v", h)
	}
	f.reconcile("w2")
	if h := f.holder(); h == nil || h.Machine != "w2" {
		t.Fatalf("w2's turn holds no budget: %+v", h)
	}
	f.dialer.Boot()
	f.reconcile("w2")
	if h := f.holder(); h != nil {
		t.Fatalf("w2 is back and still holds the budget: %+v", h)
	}
	for name, n := range nodes {
		if !slices.Equal(n.Calls, []string{"maintenance-apply", "apply " + talos.ApplyReboot.String()}) {
			t.Errorf("%s was asked %v; want the install and one reboot apply", name, n.Calls)
		}
	}
}

// A configured machine whose address now leads to another node of the
// cluster sends it nothing, and gives the budget back.
func TestConvergeRefusesAnotherNodeBehindTheAddress(t *testing.T) {
	m := machine("w1", "10.5.0.11:50000", "uuid-1")
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "0000", Effect: v1alpha1.ConfigEffectReboot, AppliedAt: metav1.Now()}
	f := newFixture(t, m)
	other := &talostest.Node{UUID: "uuid-9", Installed: true, Stage: "running", Config: []byte("version: v1alpha1\nmachine:\n  type: worker\n")}
	f.dialer.Nodes["10.5.0.11:50000"] = other

	f.reconcile("w1")
	got := f.get("w1")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.MachineConditionConfigApplied); c == nil ||
		c.Reason != v1alpha1.MachineReasonApplyFailed || !strings.Contains(c.Message, "uuid-9") || !strings.Contains(c.Message, "uuid-1") {
		t.Fatalf("ConfigApplied: %+v", c)
	}
	if len(other.Calls) != 0 {
		t.Errorf("the other node was sent %v", other.Calls)
	}
	if h := f.holder(); h != nil {
		t.Errorf("the refused step still holds the budget: %+v", h)
	}
}

// A deleted machine's node is reset once, gracefully, holding the budget;
// a look while it resets sends nothing again; once the node is back in
// maintenance mode the machine goes and the budget is free.
func TestDeletionResetsOnceThenReleases(t *testing.T) {
	m, node := configured("w1", "10.5.0.11:50000", "uuid-1", v1alpha1.MachineRoleWorker)
	f := newFixture(t, m)
	f.dialer.Nodes["10.5.0.11:50000"] = node
	f.delete("w1")

	f.reconcile("w1")
	if h := f.holder(); h == nil || h.Machine != "w1" || h.Action != v1alpha1.DisruptionReset {
		t.Fatalf("the reset holds no budget: %+v", h)
	}
	if got := f.get("w1"); got.Status.Phase != v1alpha1.MachinePhaseResetting || reason(got, v1alpha1.MachineConditionReady) != v1alpha1.MachineReasonResetting {
		t.Errorf("while resetting: phase %s, conditions %+v", got.Status.Phase, got.Status.Conditions)
	}
	f.reconcile("w1") // the node resets: it does not answer
	if !slices.Equal(node.Calls, []string{"reset graceful=true"}) {
		t.Fatalf("the node was asked %v; want one graceful reset", node.Calls)
	}
	if f.holder() == nil {
		t.Fatal("the budget went back while the node was away")
	}
	f.dialer.Boot()
	f.reconcile("w1")
	if !f.gone("w1") {
		t.Error("the machine stays after its node is back in maintenance mode")
	}
	if h := f.holder(); h != nil {
		t.Errorf("the budget is still held: %+v", h)
	}
}

// A control plane whose reset would cost etcd its quorum is not reset: the
// decision is read from etcd through another control plane at the moment
// of the reset, and the budget goes back.
func TestControlPlaneDeletionWaitsForQuorum(t *testing.T) {
	cp1, n1 := configured("cp-1", "10.5.0.2:50000", "uuid-1", v1alpha1.MachineRoleControlPlane)
	cp2, n2 := configured("cp-2", "10.5.0.3:50000", "uuid-2", v1alpha1.MachineRoleControlPlane)
	cp3, n3 := configured("cp-3", "10.5.0.4:50000", "uuid-3", v1alpha1.MachineRoleControlPlane)
	f := newFixture(t, cp1, cp2, cp3)
	f.dialer.Nodes["10.5.0.2:50000"], f.dialer.Nodes["10.5.0.3:50000"], f.dialer.Nodes["10.5.0.4:50000"] = n1, n2, n3
	n3.Stage = "booting" // cp-3's etcd member is down
	f.delete("cp-1")

	f.reconcile("cp-1")
	got := f.get("cp-1")
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.MachineConditionReady)
	if c == nil || c.Reason != v1alpha1.MachineReasonQuorumAtRisk || !strings.Contains(c.Message, "node-uuid-3") {
		t.Fatalf("Ready: %+v", c)
	}
	if len(n1.Calls) != 0 {
		t.Errorf("cp-1 was asked %v", n1.Calls)
	}
	if h := f.holder(); h != nil {
		t.Errorf("a reset that did not happen holds the budget: %+v", h)
	}

	// cp-3 is back: now cp-1 goes.
	n3.Stage = "running"
	f.reconcile("cp-1")
	if !slices.Equal(n1.Calls, []string{"reset graceful=true"}) {
		t.Errorf("cp-1 was asked %v; want one graceful reset", n1.Calls)
	}
}

// A node that shuts down is Unreachable, and stays so once it is off: it
// is not taken as booting, whose being down is expected.
func TestShutDownNodeIsUnreachable(t *testing.T) {
	f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"))
	node := &talostest.Node{UUID: "uuid-1", Stage: "maintenance"}
	f.dialer.Nodes["10.5.0.11:50000"] = node
	f.reconcile("w1")
	f.dialer.Boot()
	f.reconcile("w1")
	if m := f.get("w1"); m.Status.Phase != v1alpha1.MachinePhaseReady {
		t.Fatalf("phase %s before the shutdown", m.Status.Phase)
	}
	for _, c := range []struct{ stage, reason string }{
		{"shutting down", v1alpha1.MachineReasonShuttingDown},
		{"off", v1alpha1.MachineReasonNotReachable},
	} {
		node.Stage = c.stage
		f.reconcile("w1")
		if m := f.get("w1"); m.Status.Phase != v1alpha1.MachinePhaseUnreachable || reason(m, v1alpha1.MachineConditionReady) != c.reason {
			t.Errorf("stage %s: phase %s, Ready reason %s", c.stage, m.Status.Phase, reason(m, v1alpha1.MachineConditionReady))
		}
	}
}

// A cluster that requires SecureBoot (or seals its disks' keys in the
// TPM) sends its config, with its secrets, only to a node that says it
// booted with SecureBoot; what the node said is in status.security.
func TestInstallRequiresSecureBoot(t *testing.T) {
	for name, require := range map[string]func(*v1alpha1.TalosCluster){
		"required": func(c *v1alpha1.TalosCluster) { c.Spec.Security.SecureBoot.Required = true },
		"tpm": func(c *v1alpha1.TalosCluster) {
			c.Spec.Security.DiskEncryption = &v1alpha1.DiskEncryption{Key: v1alpha1.DiskEncryptionKeyTPM}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"))
			var c v1alpha1.TalosCluster
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
				t.Fatal(err)
			}
			require(&c)
			if err := f.client.Update(context.Background(), &c); err != nil {
				t.Fatal(err)
			}
			node := &talostest.Node{UUID: "uuid-1", Stage: "maintenance"}
			f.dialer.Nodes["10.5.0.11:50000"] = node

			f.reconcile("w1")
			m := f.get("w1")
			if reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonSecureBootRequired || m.Status.AppliedConfig != nil {
				t.Fatalf("without SecureBoot: applied %+v, conditions %+v", m.Status.AppliedConfig, m.Status.Conditions)
			}
			if len(node.Calls) != 0 {
				t.Fatalf("a node without SecureBoot was sent %v", node.Calls)
			}
			if m.Status.Security == nil || m.Status.Security.SecureBoot {
				t.Errorf("status.security %+v, want what the node said", m.Status.Security)
			}

			node.SecureBoot = true
			f.reconcile("w1")
			if m := f.get("w1"); reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonInstalled ||
				m.Status.Security == nil || !m.Status.Security.SecureBoot {
				t.Fatalf("with SecureBoot: security %+v, conditions %+v", m.Status.Security, m.Status.Conditions)
			}
		})
	}
}

// TestWorkerTakesANewTalosCAAfterTheControlPlanes: in a CA rotation's
// IssueNew phase a worker, whose API certificate a control plane's trustd
// signs, keeps its config until every control plane issues from the new
// Talos API CA, read from the nodes; then it takes it.
func TestWorkerTakesANewTalosCAAfterTheControlPlanes(t *testing.T) {
	f := newFixture(t, machine("cp1", "10.5.0.2:50000", "uuid-cp"), machine("w1", "10.5.0.11:50000", "uuid-1"))
	cp := f.get("cp1")
	cp.Spec.Role = v1alpha1.MachineRoleControlPlane
	if err := f.client.Update(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*talostest.Node{"cp1": {UUID: "uuid-cp", Stage: "maintenance", Etcd: true}, "w1": {UUID: "uuid-1", Stage: "maintenance"}}
	f.dialer.Nodes["10.5.0.2:50000"], f.dialer.Nodes["10.5.0.11:50000"] = nodes["cp1"], nodes["w1"]
	f.installReady("cp1", "w1")

	ctx := context.Background()
	var cluster v1alpha1.TalosCluster
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &cluster); err != nil {
		t.Fatal(err)
	}
	next, err := secretsbundle.NewRotationCAs(&cluster, true, false, f.now)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.CARotation = &v1alpha1.CARotationStatus{Operation: "rotate", Phase: v1alpha1.CARotationIssueNew, Talos: true, SecretDigest: next.Digest}
	if err := f.client.Status().Update(ctx, &cluster); err != nil {
		t.Fatal(err)
	}
	if err := bundlestore.StoreRotationCAs(ctx, f.client, &cluster, next); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Minute)

	applies := func(name string) int {
		n := 0
		for _, c := range nodes[name].Calls {
			if strings.HasPrefix(c, "apply ") {
				n++
			}
		}
		return n
	}
	before := applies("w1")
	f.reconcile("w1")
	m := f.get("w1")
	applied := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied)
	if applies("w1") != before || applied == nil || applied.Reason != v1alpha1.MachineReasonWaitingForRollout ||
		!strings.Contains(applied.Message, "cp1 issues from another CA") {
		t.Fatalf("w1 before cp1 issues from the new CA: %d applies, ConfigApplied %+v", applies("w1")-before, applied)
	}
	if m.Status.Phase != v1alpha1.MachinePhaseReady {
		t.Errorf("w1 waiting for its turn is %s, want Ready: it runs its config", m.Status.Phase)
	}

	// cp1 takes the phase's config (its API server restarts under the budget).
	for range 5 {
		f.reconcile("cp1")
		f.dialer.Boot()
	}
	got, err := (&talostest.Dialer{Nodes: map[string]*talostest.Node{"a": nodes["cp1"]}}).Configured(ctx, "a", talos.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if ca, err := got.TalosCA(ctx); err != nil || !bytes.Equal(ca.Issuing, next.Talos.Crt) {
		t.Fatalf("cp1 does not issue from the new CA: %v", err)
	}
	f.reconcile("w1")
	if applies("w1") != before+1 {
		t.Fatalf("w1 was not sent its config once every control plane issues from the new CA: %v", nodes["w1"].Calls)
	}
}
