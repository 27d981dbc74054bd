package machineconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/clusterindex"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/disruption"
	"ichor.dev/ichor/pkg/talos"
)

// The decisions of the reconciler — install or converge, a rollout step by
// its effect under the disruption budget, refusing another node behind the
// address — against a fake client and fake Talos nodes, in milliseconds.

const (
	ns          = "ns"
	fingerprint = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
)

// fakeNode is one node's state, as Talos would keep it.
type fakeNode struct {
	uuid      string
	installed bool   // out of maintenance mode, serving its cluster's certificate
	config    []byte // the config it runs
	stage     string
	etcd      bool // a control plane: an etcd member
	// calls logs what was asked of the node, as "maintenance-apply",
	// "apply " and the mode.
	calls []string
}

// fakeDialer hands out sessions with the fake nodes by address.
type fakeDialer struct {
	mu    sync.Mutex
	nodes map[string]*fakeNode
}

func (d *fakeDialer) node(address string) (*fakeNode, error) {
	n, ok := d.nodes[address]
	if !ok {
		return nil, fmt.Errorf("dial %s: connection refused", address)
	}
	return n, nil
}

func (d *fakeDialer) Maintenance(_ context.Context, address string, _ talos.Pin) (talos.Node, error) {
	n, err := d.node(address)
	return &session{d: d, n: n, maintenance: true, address: address}, err
}

func (d *fakeDialer) Configured(_ context.Context, address string, _ talos.Credentials) (talos.Node, error) {
	n, err := d.node(address)
	return &session{d: d, n: n, address: address}, err
}

// session is a session with a fake node; calls it does not fake panic
// (the embedded nil Node), so a test notices a call it did not expect.
type session struct {
	talos.Node
	d           *fakeDialer
	n           *fakeNode
	maintenance bool
	address     string
}

// refused is what a session of the wrong kind meets: a maintenance session
// the installed node's certificate, a configured one the maintenance API;
// and any session a node that resets.
func (s *session) refused() error {
	if s.n.stage == "resetting" {
		return fmt.Errorf("dial %s: connection refused", s.address)
	}
	if s.maintenance && s.n.installed {
		return &talos.FingerprintMismatchError{Address: s.address, Pinned: fingerprint, Presented: "ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs="}
	}
	if !s.maintenance && !s.n.installed {
		return errors.New("tls: the node asks for no client certificate (maintenance mode)")
	}
	return nil
}

func (s *session) Facts(context.Context) (*talos.Facts, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Facts{TalosVersion: "v1.13.0", UUID: s.n.uuid}, nil
}

func (s *session) ApplyConfiguration(_ context.Context, config []byte, mode talos.ApplyMode) (*talos.ApplyResult, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if s.maintenance {
		s.n.calls = append(s.n.calls, "maintenance-apply")
		s.n.installed, s.n.config, s.n.stage = true, config, "installing"
		return &talos.ApplyResult{Rebooting: true, Details: "installing"}, nil
	}
	s.n.calls = append(s.n.calls, "apply "+mode.String())
	s.n.config = config
	if mode == talos.ApplyReboot {
		s.n.stage = "rebooting"
		return &talos.ApplyResult{Rebooting: true, Details: "rebooting"}, nil
	}
	return &talos.ApplyResult{Details: "applied"}, nil
}

func (s *session) Status(context.Context) (*talos.Status, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Status{Stage: s.n.stage, Ready: s.n.stage == "running", Nodename: "node-" + s.n.uuid}, nil
}

func (s *session) Config(context.Context) ([]byte, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return slices.Clone(s.n.config), nil
}

func (s *session) Reset(_ context.Context, graceful bool) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.calls = append(s.n.calls, fmt.Sprintf("reset graceful=%v", graceful))
	s.n.stage = "resetting"
	return nil
}

// EtcdMembers lists every node of the dialer that runs etcd (etcd true), as
// a member named for its node.
func (s *session) EtcdMembers(context.Context) ([]talos.EtcdMember, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	var members []talos.EtcdMember
	for _, n := range s.d.nodes {
		if n.etcd {
			members = append(members, talos.EtcdMember{ID: n.uuid, Hostname: "node-" + n.uuid})
		}
	}
	return members, nil
}

func (s *session) Close() error { return nil }

// fixture is a cluster with its bundle and the reconciler under test.
type fixture struct {
	t      *testing.T
	client client.Client
	dialer *fakeDialer
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
	bundle, err := clustersecrets.Generate("v1.13.0", now)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: clustersecrets.SecretName(cluster), Namespace: ns},
		Data:       map[string][]byte{clustersecrets.BundleKey: bundle},
	}
	byCluster := func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(append([]client.Object{cluster, secret}, objs...)...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}, &v1alpha1.TalosConfigPatch{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, byCluster).
		WithIndex(&v1alpha1.TalosConfigPatch{}, clusterindex.Field, byCluster).
		Build()
	f := &fixture{t: t, client: c, dialer: &fakeDialer{nodes: map[string]*fakeNode{}}, now: now}
	f.r = &Reconciler{
		Client: c, APIReader: c, Secrets: c, Dialer: f.dialer,
		Recorder: events.NewFakeRecorder(100), Options: Options{}.withDefaults(),
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

// boot makes every installing or rebooting node run its config, and every
// resetting one come back in maintenance mode.
func (f *fixture) boot() {
	f.dialer.mu.Lock()
	defer f.dialer.mu.Unlock()
	for _, n := range f.dialer.nodes {
		switch n.stage {
		case "installing", "rebooting":
			n.stage = "running"
		case "resetting":
			n.stage, n.installed, n.config, n.etcd = "maintenance", false, nil, false
		}
	}
}

// configured is machine m of role, recorded as configured on node-<uuid>,
// and its node, running.
func configured(name, address, uuid string, role v1alpha1.MachineRole) (*v1alpha1.TalosMachine, *fakeNode) {
	m := machine(name, address, uuid)
	m.Spec.Role = role
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "00", Effect: v1alpha1.ConfigEffectReboot, AppliedAt: metav1.Now()}
	m.Status.Phase, m.Status.NodeName = v1alpha1.MachinePhaseReady, "node-"+uuid
	return m, &fakeNode{uuid: uuid, installed: true, stage: "running", etcd: role == v1alpha1.MachineRoleControlPlane}
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
	node := &fakeNode{uuid: "uuid-1", stage: "maintenance"}
	f.dialer.nodes["10.5.0.11:50000"] = node

	f.reconcile("w1")
	m := f.get("w1")
	if m.Status.AppliedConfig == nil || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonInstalled ||
		m.Status.Phase != v1alpha1.MachinePhaseConfiguring {
		t.Fatalf("after the install: phase %s, applied %+v, conditions %+v", m.Status.Phase, m.Status.AppliedConfig, m.Status.Conditions)
	}
	// Still installing: followed over mutual TLS, nothing sent again.
	f.reconcile("w1")
	if m := f.get("w1"); reason(m, v1alpha1.MachineConditionReady) == v1alpha1.MachineReasonRunning {
		t.Fatalf("Ready while the node installs: %+v", m.Status.Conditions)
	}
	f.boot()
	f.reconcile("w1")
	m = f.get("w1")
	if m.Status.Phase != v1alpha1.MachinePhaseReady || reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonUpToDate ||
		m.Status.NodeName != "node-uuid-1" {
		t.Fatalf("after the boot: phase %s, node %q, conditions %+v", m.Status.Phase, m.Status.NodeName, m.Status.Conditions)
	}
	f.reconcile("w1")
	if !slices.Equal(node.calls, []string{"maintenance-apply"}) {
		t.Errorf("the node was asked %v; want one install and nothing since", node.calls)
	}
}

// The install's status write was lost: the retry finds the node configured
// (its maintenance API gone) and records it, instead of pinning on a
// certificate mismatch forever.
func TestInstallWhoseRecordWasLost(t *testing.T) {
	f := newFixture(t, machine("w1", "10.5.0.11:50000", "uuid-1"))
	node := &fakeNode{uuid: "uuid-1", stage: "maintenance"}
	f.dialer.nodes["10.5.0.11:50000"] = node
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
	if !slices.Equal(node.calls, []string{"maintenance-apply"}) {
		t.Errorf("the node was asked %v; want the one install", node.calls)
	}

	// A node that only refuses the pin, but is not this machine, is not taken for it.
	g := newFixture(t, machine("w2", "10.5.0.12:50000", "uuid-2"))
	g.dialer.nodes["10.5.0.12:50000"] = &fakeNode{uuid: "uuid-other", installed: true, stage: "running"}
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
	nodes := map[string]*fakeNode{"w1": {uuid: "uuid-1", stage: "maintenance"}, "w2": {uuid: "uuid-2", stage: "maintenance"}}
	f.dialer.nodes["10.5.0.11:50000"], f.dialer.nodes["10.5.0.12:50000"] = nodes["w1"], nodes["w2"]
	for _, name := range []string{"w1", "w2"} {
		f.reconcile(name)
	}
	f.boot()
	for _, name := range []string{"w1", "w2"} {
		f.reconcile(name)
		if m := f.get(name); m.Status.Phase != v1alpha1.MachinePhaseReady {
			t.Fatalf("%s is %s before the patch", name, m.Status.Phase)
		}
	}

	patch := &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: ns, Generation: 1},
		Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: "demo", Patch: "machine:\n  env:\n    HTTP_PROXY: http://10.5.0.1:3128\n"},
	}
	if err := f.client.Create(context.Background(), patch); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Minute)
	f.reconcile("w1")
	if h := f.holder(); h == nil || h.Machine != "w1" || h.Action != v1alpha1.DisruptionReboot {
		t.Fatalf("w1's reboot step holds no budget: %+v", h)
	}
	f.reconcile("w2")
	if m := f.get("w2"); reason(m, v1alpha1.MachineConditionConfigApplied) != v1alpha1.MachineReasonWaitingForRollout {
		t.Errorf("w2 while w1 reboots: %+v", m.Status.Conditions)
	}
	if got := nodes["w2"].calls; len(got) != 1 {
		t.Fatalf("w2 was sent %v while w1 was away", got)
	}
	// A second look at w1 while it reboots sends nothing again.
	f.reconcile("w1")
	f.boot()
	f.reconcile("w1")
	if h := f.holder(); h != nil {
		t.Fatalf("w1 is back and still holds the budget: %+v", h)
	}
	f.reconcile("w2")
	if h := f.holder(); h == nil || h.Machine != "w2" {
		t.Fatalf("w2's turn holds no budget: %+v", h)
	}
	f.boot()
	f.reconcile("w2")
	if h := f.holder(); h != nil {
		t.Fatalf("w2 is back and still holds the budget: %+v", h)
	}
	for name, n := range nodes {
		if !slices.Equal(n.calls, []string{"maintenance-apply", "apply " + talos.ApplyReboot.String()}) {
			t.Errorf("%s was asked %v; want the install and one reboot apply", name, n.calls)
		}
	}
}

// A configured machine whose address now leads to another node of the
// cluster sends it nothing, and gives the budget back.
func TestConvergeRefusesAnotherNodeBehindTheAddress(t *testing.T) {
	m := machine("w1", "10.5.0.11:50000", "uuid-1")
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "0000", Effect: v1alpha1.ConfigEffectReboot, AppliedAt: metav1.Now()}
	f := newFixture(t, m)
	other := &fakeNode{uuid: "uuid-9", installed: true, stage: "running", config: []byte("version: v1alpha1\nmachine:\n  type: worker\n")}
	f.dialer.nodes["10.5.0.11:50000"] = other

	f.reconcile("w1")
	got := f.get("w1")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.MachineConditionConfigApplied); c == nil ||
		c.Reason != v1alpha1.MachineReasonApplyFailed || !strings.Contains(c.Message, "uuid-9") || !strings.Contains(c.Message, "uuid-1") {
		t.Fatalf("ConfigApplied: %+v", c)
	}
	if len(other.calls) != 0 {
		t.Errorf("the other node was sent %v", other.calls)
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
	f.dialer.nodes["10.5.0.11:50000"] = node
	f.delete("w1")

	f.reconcile("w1")
	if h := f.holder(); h == nil || h.Machine != "w1" || h.Action != v1alpha1.DisruptionReset {
		t.Fatalf("the reset holds no budget: %+v", h)
	}
	if got := f.get("w1"); got.Status.Phase != v1alpha1.MachinePhaseResetting || reason(got, v1alpha1.MachineConditionReady) != v1alpha1.MachineReasonResetting {
		t.Errorf("while resetting: phase %s, conditions %+v", got.Status.Phase, got.Status.Conditions)
	}
	f.reconcile("w1") // the node resets: it does not answer
	if !slices.Equal(node.calls, []string{"reset graceful=true"}) {
		t.Fatalf("the node was asked %v; want one graceful reset", node.calls)
	}
	if f.holder() == nil {
		t.Fatal("the budget went back while the node was away")
	}
	f.boot()
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
	f.dialer.nodes["10.5.0.2:50000"], f.dialer.nodes["10.5.0.3:50000"], f.dialer.nodes["10.5.0.4:50000"] = n1, n2, n3
	n3.stage = "booting" // cp-3's etcd member is down
	f.delete("cp-1")

	f.reconcile("cp-1")
	got := f.get("cp-1")
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.MachineConditionReady)
	if c == nil || c.Reason != v1alpha1.MachineReasonQuorumAtRisk || !strings.Contains(c.Message, "node-uuid-3") {
		t.Fatalf("Ready: %+v", c)
	}
	if len(n1.calls) != 0 {
		t.Errorf("cp-1 was asked %v", n1.calls)
	}
	if h := f.holder(); h != nil {
		t.Errorf("a reset that did not happen holds the budget: %+v", h)
	}

	// cp-3 is back: now cp-1 goes.
	n3.stage = "running"
	f.reconcile("cp-1")
	if !slices.Equal(n1.calls, []string{"reset graceful=true"}) {
		t.Errorf("cp-1 was asked %v; want one graceful reset", n1.calls)
	}
}
