package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events/eventstest"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos/talostest"
	"ichor.dev/ichor/pkg/workload"
)

// The runs of the reconciler against a fake client and fake Talos nodes, in
// milliseconds: a rolling reboot and a Talos upgrade, each with the
// controller "crashing" at every status write it makes, and the refusals.

const ns = "ns"

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// fixture is a Ready cluster of three control planes and a worker, an
// operation started on it, and the reconciler under test.
type fixture struct {
	t      *testing.T
	client client.Client
	dialer *talostest.Dialer
	r      *Reconciler
	// failWrite, when positive, fails that (1-based) status write of the
	// operation, as a controller that crashed before it would.
	failWrite, writes int
	// mostAway is the most nodes seen away (rebooting) at once, and
	// mostAwayCPs the most control planes.
	mostAway, mostAwayCPs int
	// kube is the managed cluster's API.
	kube *kubefake.Clientset
	// kubeProxyStuck keeps kube-proxy's DaemonSet from rolling out.
	kubeProxyStuck bool
	// react, when set, plays the rest of the system after each reconcile.
	react func()
	// names are the cluster's machines.
	names []string
	// failMachinePatches fails that many TalosMachine status patches.
	failMachinePatches int
	// beforeWrite, when set, is called before each write of a Secret and
	// of the cluster's status, with what it is ("create Secret NAME",
	// "apply TalosCluster status", …); its error is the write's.
	beforeWrite func(what string) error
	// clock is the reconciler's, moved on by PollInterval after each
	// reconcile, as the waits the reconciler asks for pass.
	clock time.Time
}

// bundle is the secrets bundle every fixture shares: generating one takes a while.
var (
	bundleOnce sync.Once
	bundle     []byte
	bundleErr  error
)

var machineNames = []string{"worker-1", "cp-2", "cp-1", "cp-3"} // not in step order, on purpose

func newFixture(t *testing.T, op *v1alpha1.TalosOperation) *fixture {
	t.Helper()
	return newFixtureOf(t, op, machineNames)
}

// newFixtureOf is newFixture with the machines names (control planes are
// named cp-*).
func newFixtureOf(t *testing.T, op *v1alpha1.TalosOperation, names []string) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cond := func(t, r string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: r, LastTransitionTime: metav1.NewTime(now)}
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns, UID: "uid-demo", Generation: 1},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"}},
		Status: v1alpha1.TalosClusterStatus{Conditions: []metav1.Condition{
			cond(v1alpha1.ClusterConditionSecretsReady, v1alpha1.ClusterReasonGenerated),
			cond(v1alpha1.ClusterConditionEtcdHealthy, v1alpha1.ClusterReasonMembersHealthy),
		}},
	}
	bundleOnce.Do(func() { bundle, bundleErr = secretsbundle.Generate("v1.13.0", now) })
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
	cluster.Status.SecretsDigest = secretsbundle.Digest(bundle)
	objs := []client.Object{cluster, op, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: ns},
		Data:       map[string][]byte{secretsbundle.BundleKey: bundle},
	}}
	f := &fixture{t: t, dialer: &talostest.Dialer{Nodes: map[string]*talostest.Node{}}, names: names}
	for _, name := range names {
		role := v1alpha1.MachineRoleControlPlane
		if strings.HasPrefix(name, "worker") {
			role = v1alpha1.MachineRoleWorker
		}
		address := name + ":50000"
		objs = append(objs, &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
			Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: role, Address: address, Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
			Status: v1alpha1.TalosMachineStatus{
				Phase:         v1alpha1.MachinePhaseReady,
				NodeName:      "node-" + name,
				Approval:      &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "olivia"},
				Hardware:      &v1alpha1.HardwareStatus{UUID: name},
				AppliedConfig: &v1alpha1.AppliedConfigStatus{Hash: "h", AppliedAt: metav1.NewTime(now)},
			},
		})
		f.dialer.Nodes[address] = &talostest.Node{UUID: name, Installed: true, Stage: "running", Etcd: role == v1alpha1.MachineRoleControlPlane,
			Config: []byte("version: v1alpha1\nmachine:\n  type: worker\n  install:\n    image: siderolabs/installer:v1.13.0\n")}
	}
	f.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}, &v1alpha1.TalosOperation{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if err := f.secretWrite("create", obj); err != nil {
					return err
				}
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := f.secretWrite("update", obj); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if err := f.secretWrite("delete", obj); err != nil {
					return err
				}
				return c.Delete(ctx, obj, opts...)
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				if _, ok := obj.(*ichorac.TalosClusterApplyConfiguration); ok && sub == "status" && f.beforeWrite != nil {
					if err := f.beforeWrite("apply TalosCluster status"); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if sub == "kubernetes-version" {
					// The fake serves no field subresources: write the object.
					return c.Update(ctx, obj)
				}
				if _, ok := obj.(*v1alpha1.TalosOperation); ok && sub == "status" {
					f.writes++
					if f.writes == f.failWrite {
						return errors.New("injected: the controller stopped before this write")
					}
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			// The fake serves no finalizers subresource: write them through the object.
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if sub == "finalizers" {
					return c.Patch(ctx, obj, patch)
				}
				if _, ok := obj.(*v1alpha1.TalosCluster); ok && sub == "status" && f.beforeWrite != nil {
					if err := f.beforeWrite("patch TalosCluster status"); err != nil {
						return err
					}
				}
				if _, ok := obj.(*v1alpha1.TalosMachine); ok && sub == "status" && f.failMachinePatches > 0 {
					f.failMachinePatches--
					return errors.New("injected: the controller stopped before this machine status write")
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	f.r = &Reconciler{
		Client: f.client, APIReader: f.client, Secrets: f.client, Dialer: f.dialer,
		Recorder: eventstest.New(t, 1000), Options: Options{}.withDefaults(),
		Now: func() time.Time { return f.clock },
	}
	f.clock = now
	f.r.budget = &disruption.Budget{Client: f.client, Reader: f.client, Now: f.r.Now}
	// The managed cluster's API: every Node Ready, reported after any reboot.
	var nodes []runtime.Object
	for _, name := range names {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(now.Add(time.Hour))}},
		}})
	}
	f.kube = kubefake.NewClientset(nodes...)
	f.r.Workload = func(*secrets.Bundle, string) (kubernetes.Interface, error) { return f.kube, nil }
	return f
}

// secretWrite calls beforeWrite before the write (verb) of a Secret.
func (f *fixture) secretWrite(verb string, obj client.Object) error {
	if _, ok := obj.(*corev1.Secret); !ok || f.beforeWrite == nil {
		return nil
	}
	return f.beforeWrite(verb + " Secret " + obj.GetName())
}

func started(name string, spec v1alpha1.TalosOperationSpec) *v1alpha1.TalosOperation {
	at := metav1.NewTime(now)
	return &v1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       spec,
		Status:     v1alpha1.TalosOperationStatus{Phase: v1alpha1.OperationPending, StartedBy: "olivia", StartedAt: &at},
	}
}

// run reconciles the operation until it ends, booting the nodes that
// rebooted after each reconcile, and returns it.
func (f *fixture) run(name string) *v1alpha1.TalosOperation {
	f.t.Helper()
	for range 200 {
		f.once(name)
		op := f.get(name)
		if op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed {
			return op
		}
	}
	f.t.Fatalf("operation %s did not end: %+v", name, f.get(name).Status)
	return nil
}

// once reconciles the operation once, then boots the nodes that rebooted
// and moves the clock on by a poll interval.
func (f *fixture) once(name string) {
	f.t.Helper()
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	f.r.prepulls.wait() // nodes change only between reconciles
	if err != nil && !strings.Contains(err.Error(), "injected") {
		f.t.Fatalf("reconcile: %v", err)
	}
	away, awayCPs := 0, 0
	for address, n := range f.dialer.Nodes {
		if n.Stage != "running" {
			away++
			if strings.HasPrefix(address, "cp-") {
				awayCPs++
			}
		}
	}
	f.mostAway = max(f.mostAway, away)
	f.mostAwayCPs = max(f.mostAwayCPs, awayCPs)
	f.dialer.Boot()
	f.clock = f.clock.Add(f.r.Options.PollInterval)
	if f.react != nil {
		f.react()
	}
}

func (f *fixture) get(name string) *v1alpha1.TalosOperation {
	f.t.Helper()
	var op v1alpha1.TalosOperation
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &op); err != nil {
		f.t.Fatal(err)
	}
	return &op
}

func (f *fixture) node(name string) *talostest.Node { return f.dialer.Nodes[name+":50000"] }

func (f *fixture) budgetFree() bool {
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	return c.Status.Disruption == nil
}

func stepMachines(op *v1alpha1.TalosOperation) []string {
	var out []string
	for _, s := range op.Status.Steps {
		out = append(out, s.Machine)
	}
	return out
}

// TestRebootSurvivesACrashAtEveryWrite: whichever status write is lost, the
// rolling reboot ends Succeeded with every node booted exactly once, one at
// a time, control planes first, and the budget free.
func TestRebootSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot}))
			f.failWrite = fail
			op := f.run("reboot")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := stepMachines(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3", "worker-1"}) {
				t.Errorf("steps %v, want control planes first", got)
			}
			for _, name := range machineNames {
				if n := f.node(name); n.Boots != 1 {
					t.Errorf("%s booted %d times (calls %v)", name, n.Boots, n.Calls)
				}
			}
			if f.mostAway != 1 {
				t.Errorf("%d nodes away at once", f.mostAway)
			}
			if !f.budgetFree() {
				t.Error("the budget is still held")
			}
			for _, name := range machineNames {
				n, err := f.kube.CoreV1().Nodes().Get(context.Background(), "node-"+name, metav1.GetOptions{})
				if err != nil || n.Spec.Unschedulable || n.Annotations[workload.CordonAnnotation] != "" {
					t.Errorf("Node of %s left cordoned: %+v, %v", name, n, err)
				}
			}
			if !meta.IsStatusConditionTrue(op.Status.Conditions, v1alpha1.OperationConditionSucceeded) || len(op.Finalizers) != 0 {
				t.Errorf("conditions %+v, finalizers %v", op.Status.Conditions, op.Finalizers)
			}
		})
	}
	// One write starts the operation, one records each step (with the
	// previous one's end), one ends it.
	if total != len(machineNames)+2 {
		t.Fatalf("%d status writes, want %d: the crash points were not all exercised", total, len(machineNames)+2)
	}
}

// TestRebootSurvivesAnUnansweredCall: a reboot call the node does not
// answer (it never got it, or its answer was lost as it went down) leaves
// the step to the node's own state: asked again if it still runs the same
// boot, followed if it went away; rebooted once either way.
func TestRebootSurvivesAnUnansweredCall(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("answer lost %v", lost), func(t *testing.T) {
			f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot}))
			cp2 := f.node("cp-2")
			cp2.Unanswered, cp2.AnswerLost = 1, lost
			op := f.run("reboot")
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			for _, name := range machineNames {
				if n := f.node(name); n.Boots != 1 {
					t.Errorf("%s booted %d times (calls %v)", name, n.Boots, n.Calls)
				}
			}
			reboots := 0
			for _, c := range cp2.Calls {
				if strings.HasPrefix(c, "reboot") {
					reboots++
				}
			}
			if reboots != 1 || cp2.Unanswered != 0 {
				t.Errorf("cp-2 took %d reboot calls (want 1), %d unanswered left: %v", reboots, cp2.Unanswered, cp2.Calls)
			}
			if f.mostAway != 1 || !f.budgetFree() {
				t.Errorf("%d nodes away at once; budget free %v", f.mostAway, f.budgetFree())
			}
		})
	}
}

// TestRebootTakenOverAfterItsTime: a leader that recorded cp-2's step and
// died before its reboot call reached the node leaves the step to the next
// leader, which takes it up more than StepTimeout after the step began (a
// lease runs out first). The time without a controller is not the node's:
// the new leader asks the node, and the step succeeds with one reboot.
func TestRebootTakenOverAfterItsTime(t *testing.T) {
	f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot}))
	cp2 := f.node("cp-2")
	cp2.Unanswered = 1 // the call never reaches the node
	for i := 0; cp2.Unanswered > 0; i++ {
		if i == 100 {
			t.Fatalf("cp-2's reboot was never called: %+v", f.get("reboot").Status)
		}
		f.once("reboot")
	}
	// The leader dies here; the next one takes the lease after it runs out.
	old := f.r
	f.r = &Reconciler{Client: old.Client, APIReader: old.APIReader, Secrets: old.Secrets, Dialer: old.Dialer,
		Recorder: old.Recorder, Options: old.Options, Now: old.Now, Workload: old.Workload}
	f.r.budget = &disruption.Budget{Client: f.client, Reader: f.client, Now: f.r.Now}
	f.clock = f.clock.Add(f.r.Options.StepTimeout + 15*time.Second)
	op := f.run("reboot")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, name := range machineNames {
		if n := f.node(name); n.Boots != 1 {
			t.Errorf("%s booted %d times (calls %v)", name, n.Boots, n.Calls)
		}
	}
}

// TestUpgradeSurvivesACrashAtEveryWrite: the same for a Talos upgrade, which
// also pulls and runs the installer on each node once before its reboot.
func TestUpgradeSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, started("upgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
				TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}}))
			f.failWrite = fail
			op := f.run("upgrade")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			for _, name := range machineNames {
				n := f.node(name)
				if n.Boots != 1 || n.TalosVersion != "v1.13.1" {
					t.Errorf("%s booted %d times, runs %q (calls %v)", name, n.Boots, n.TalosVersion, n.Calls)
				}
				if !slices.Contains(n.Calls, "pull siderolabs/installer:v1.13.1") || !slices.Contains(n.Calls, "upgrade siderolabs/installer:v1.13.1") {
					t.Errorf("%s calls %v", name, n.Calls)
				}
				if strings.HasPrefix(name, "cp") != slices.Contains(n.Calls, "forfeit-leadership") {
					t.Errorf("%s forfeits leadership: calls %v", name, n.Calls)
				}
				var m v1alpha1.TalosMachine
				if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil || m.Status.TalosVersion != "v1.13.1" {
					t.Errorf("%s records Talos %q, %v", name, m.Status.TalosVersion, err)
				}
			}
			if f.mostAway != 1 || !f.budgetFree() {
				t.Errorf("%d nodes away at once; budget free %v", f.mostAway, f.budgetFree())
			}
		})
	}
}

// TestUpgradeToAnotherSchematic: an upgrade to the version the nodes run
// reinstalls only those that booted another schematic than their config's
// Image Factory installer names, under the budget; a node that booted it
// is done without a reboot.
func TestUpgradeToAnotherSchematic(t *testing.T) {
	f := newFixture(t, started("upgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
		TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.0"}}))
	const installer = "factory.test/installer/613e15"
	for _, name := range machineNames {
		n := f.node(name)
		n.Config = []byte("version: v1alpha1\nmachine:\n  type: worker\n  install:\n    image: " + installer + ":v1.13.0\n")
		n.Schematic, n.TalosVersion = "376567", "v1.13.0"
	}
	f.node("worker-1").Schematic = "613e15"
	op := f.run("upgrade")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, name := range machineNames {
		n, again := f.node(name), name != "worker-1"
		if wantBoots := map[bool]int{true: 1, false: 0}[again]; n.Boots != wantBoots || n.Schematic != "613e15" || n.TalosVersion != "v1.13.0" {
			t.Errorf("%s booted %d times (want %d), runs %s of schematic %s (calls %v)", name, n.Boots, wantBoots, n.TalosVersion, n.Schematic, n.Calls)
		}
		if got := slices.Contains(n.Calls, "upgrade "+installer+":v1.13.0"); got != again {
			t.Errorf("%s ran the installer: %v (calls %v)", name, got, n.Calls)
		}
	}
	if f.mostAway != 1 || !f.budgetFree() {
		t.Errorf("%d nodes away at once; budget free %v", f.mostAway, f.budgetFree())
	}
}

// TestRebootInBatches: with maxUnavailable 2, the control planes still
// reboot one at a time and the workers two at a time, whichever status
// write is lost; each node reboots once and the budget ends free.
func TestRebootInBatches(t *testing.T) {
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2", "worker-3"}
	two := int32(2)
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixtureOf(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot, MaxUnavailable: &two}), names)
			f.failWrite = fail
			op := f.run("reboot")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			for _, name := range names {
				if n := f.node(name); n.Boots != 1 {
					t.Errorf("%s booted %d times", name, n.Boots)
				}
			}
			// A lost write may leave a batch short, never over.
			if (fail == 0 && f.mostAway != 2) || f.mostAway > 2 || f.mostAwayCPs != 1 || !f.budgetFree() {
				t.Errorf("%d nodes away at once, %d control planes; budget free %v", f.mostAway, f.mostAwayCPs, f.budgetFree())
			}
		})
	}
}

// TestBatchStepFails: a worker of a batch that refuses the upgrade fails
// its step; its batch mate in flight is followed until its node is back,
// no further step starts, and the operation then ends Failed with the budget
// free.
func TestBatchStepFails(t *testing.T) {
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2", "worker-3"}
	two := int32(2)
	f := newFixtureOf(t, started("upgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
		TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}, MaxUnavailable: &two}), names)
	f.node("worker-2").RefuseUpgrade = "the system disk is read-only"
	op := f.run("upgrade")
	phases := map[string]v1alpha1.OperationPhase{}
	for _, s := range op.Status.Steps {
		phases[s.Machine] = s.Phase
	}
	if op.Status.Phase != v1alpha1.OperationFailed || phases["worker-1"] != v1alpha1.OperationSucceeded ||
		phases["worker-2"] != v1alpha1.OperationFailed || phases["worker-3"] != v1alpha1.OperationPending {
		t.Errorf("phase %s, steps %v", op.Status.Phase, phases)
	}
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil || !strings.Contains(c.Message, "step worker-2 failed") {
		t.Errorf("Succeeded condition %+v", c)
	}
	if f.node("worker-1").Boots != 1 || f.node("worker-3").Boots != 0 || !f.budgetFree() {
		t.Errorf("worker-1 booted %d, worker-3 %d times; budget free %v", f.node("worker-1").Boots, f.node("worker-3").Boots, f.budgetFree())
	}
}

// TestFailedBatchLetsGo: a worker of a batch never comes back while its
// batch mate, holding its place in the budget, waits for a pod that may
// not be evicted. The failed step stops the operation, and what it still
// held goes: the budget is free and the draining worker's Node uncordoned.
func TestFailedBatchLetsGo(t *testing.T) {
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2", "worker-3"}
	two := int32(2)
	f := newFixtureOf(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot, MaxUnavailable: &two}), names)
	f.r.Options.StepTimeout = 30 * time.Second
	f.node("worker-1").NeverBoots = true
	ctx := context.Background()
	if _, err := f.kube.CoreV1().Pods("apps").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec: corev1.PodSpec{NodeName: "node-worker-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewTooManyRequests("a PodDisruptionBudget does not allow it", 10)
	})
	op := f.run("reboot")
	phases := map[string]v1alpha1.OperationPhase{}
	for _, s := range op.Status.Steps {
		phases[s.Machine] = s.Phase
	}
	if op.Status.Phase != v1alpha1.OperationFailed || phases["worker-1"] != v1alpha1.OperationFailed ||
		phases["worker-2"] != v1alpha1.OperationPending || phases["worker-3"] != v1alpha1.OperationPending {
		t.Fatalf("phase %s, steps %v", op.Status.Phase, phases)
	}
	if !f.budgetFree() {
		t.Error("the budget stays held after the operation failed")
	}
	n, err := f.kube.CoreV1().Nodes().Get(ctx, "node-worker-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[workload.CordonAnnotation] != "" {
		t.Errorf("worker-2's Node stays cordoned: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
	if f.node("worker-2").Boots != 0 || f.node("worker-3").Boots != 0 {
		t.Error("a worker rebooted after the failure")
	}
}

// TestUpgradeRefusedByTheInstaller: the step of the node whose installer
// exits non-zero fails, with its output; no later step starts.
func TestUpgradeRefusedByTheInstaller(t *testing.T) {
	f := newFixture(t, started("upgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
		TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}}))
	f.node("cp-2").RefuseUpgrade = "the system disk is read-only"
	op := f.run("upgrade")
	phases := map[string]v1alpha1.OperationPhase{}
	for _, s := range op.Status.Steps {
		phases[s.Machine] = s.Phase
		if s.Machine == "cp-2" && !strings.Contains(s.Message, "the node refused the upgrade") && !strings.Contains(s.Message, "read-only") {
			t.Errorf("cp-2's step says %q", s.Message)
		}
	}
	if op.Status.Phase != v1alpha1.OperationFailed || phases["cp-1"] != v1alpha1.OperationSucceeded || phases["cp-2"] != v1alpha1.OperationFailed ||
		phases["cp-3"] != v1alpha1.OperationPending || phases["worker-1"] != v1alpha1.OperationPending {
		t.Errorf("phase %s, steps %v", op.Status.Phase, phases)
	}
	if f.node("cp-2").Boots != 0 || f.node("cp-3").Boots != 0 || !f.budgetFree() {
		t.Errorf("cp-2 booted %d, cp-3 %d times; budget free %v", f.node("cp-2").Boots, f.node("cp-3").Boots, f.budgetFree())
	}
}

// TestQuorumHoldsAControlPlaneBack: with another control plane's etcd
// member down, a control plane's step waits, saying why, and takes nothing.
func TestQuorumHoldsAControlPlaneBack(t *testing.T) {
	f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot,
		Machines: []string{"cp-1"}}))
	f.node("cp-3").Stage = "resetting" // its API refuses every call
	// Started past the health check, so that only quorum decides.
	op := f.get("reboot")
	meta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{Type: v1alpha1.OperationConditionHealthOverridden, Status: metav1.ConditionTrue,
		Reason: v1alpha1.OperationReasonOverridden, LastTransitionTime: metav1.NewTime(now)})
	op.Status.Phase = v1alpha1.OperationRunning
	op.Status.Steps = []v1alpha1.OperationStep{{Machine: "cp-1", Phase: v1alpha1.OperationPending}}
	if err := f.client.Status().Update(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "reboot"}}); err != nil {
			t.Fatal(err)
		}
	}
	op = f.get("reboot")
	if s := op.Status.Steps[0]; s.Phase != v1alpha1.OperationPending || !strings.Contains(s.Message, "etcd would lose its quorum without cp-1") {
		t.Errorf("step %+v", s)
	}
	if f.node("cp-1").Stage != "running" || len(f.node("cp-1").Calls) != 0 || !f.budgetFree() {
		t.Errorf("cp-1 %s, calls %v; budget free %v", f.node("cp-1").Stage, f.node("cp-1").Calls, f.budgetFree())
	}
}

// TestOneOperationPerCluster: a second started operation waits Pending while
// the first runs.
func TestOneOperationPerCluster(t *testing.T) {
	f := newFixture(t, started("first", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot}))
	second := started("second", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationEtcdDefrag})
	if err := f.client.Create(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	op := f.get("second")
	c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
	if op.Status.Phase != v1alpha1.OperationPending || c == nil || c.Reason != v1alpha1.OperationReasonWaitingForOperation || !strings.Contains(c.Message, "first") {
		t.Errorf("second: %s, %+v", op.Status.Phase, c)
	}
	if f.run("first").Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatal("first did not succeed")
	}
	if op := f.run("second"); op.Status.Phase != v1alpha1.OperationSucceeded || len(op.Status.Steps) != 3 {
		t.Errorf("second: %+v", op.Status)
	}
}

// TestClusterHealthOverride: on a cluster with a machine not Ready, a
// started operation waits, saying why, until an admin's ClusterHealth
// override, which it records and uses up; its steps then do not wait for
// that machine.
func TestClusterHealthOverride(t *testing.T) {
	f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot,
		Machines: []string{"cp-1"}}))
	ctx := context.Background()
	var m v1alpha1.TalosMachine
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "worker-1"}, &m); err != nil {
		t.Fatal(err)
	}
	m.Status.Phase = v1alpha1.MachinePhaseUnreachable
	if err := f.client.Status().Update(ctx, &m); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "reboot"}}
	if _, err := f.r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	op := f.get("reboot")
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing); op.Status.Phase != v1alpha1.OperationPending ||
		c == nil || c.Reason != v1alpha1.OperationReasonClusterNotHealthy || !strings.Contains(c.Message, "worker-1 (Unreachable)") {
		t.Fatalf("before the override: %s, %+v", op.Status.Phase, c)
	}
	var c v1alpha1.TalosCluster
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		t.Fatal(err)
	}
	c.Status.Override = &v1alpha1.OverrideStatus{Check: v1alpha1.CheckClusterHealth, Reason: "worker-1 is being replaced", By: "carol", At: metav1.NewTime(now)}
	if err := f.client.Status().Update(ctx, &c); err != nil {
		t.Fatal(err)
	}
	op = f.run("reboot")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("after the override: %+v", op.Status)
	}
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionHealthOverridden); c == nil || !strings.Contains(c.Message, "carol") {
		t.Errorf("ClusterHealthOverridden %+v", c)
	}
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil || c.Status.Override != nil {
		t.Errorf("the override after use: %+v, %v", c.Status.Override, err)
	}
}

// TestRebootDrainsTheNode: before its reboot a node is cordoned and its
// pods evicted (not its DaemonSet and static pods); afterwards it is
// uncordoned. A Node an admin cordoned stays cordoned.
func TestRebootDrainsTheNode(t *testing.T) {
	f := newFixture(t, started("reboot", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationReboot,
		Machines: []string{"cp-1", "cp-2"}}))
	ctx := context.Background()
	yes := true
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"}, Spec: corev1.PodSpec{NodeName: "node-cp-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "node-cp-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp-1", Namespace: "kube-system", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
			Spec: corev1.PodSpec{NodeName: "node-cp-1"}},
	} {
		if _, err := f.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cp2, err := f.kube.CoreV1().Nodes().Get(ctx, "node-cp-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp2.Spec.Unschedulable = true // an admin's cordon
	if _, err := f.kube.CoreV1().Nodes().Update(ctx, cp2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var evicted []string
	f.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if n, _ := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "node-cp-1"); !n.(*corev1.Node).Spec.Unschedulable {
			t.Errorf("pod %s evicted from a Node that is not cordoned", ev.Name)
		}
		if f.node("cp-1").Stage != "running" {
			t.Errorf("pod %s evicted after the reboot began", ev.Name)
		}
		evicted = append(evicted, ev.Namespace+"/"+ev.Name)
		return true, nil, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
	if op := f.run("reboot"); op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("%+v", op.Status)
	}
	if !slices.Equal(evicted, []string{"apps/web"}) {
		t.Errorf("evicted %v, want only apps/web", evicted)
	}
	for node, want := range map[string]bool{"node-cp-1": false, "node-cp-2": true} {
		n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || n.Spec.Unschedulable != want {
			t.Errorf("%s unschedulable=%v, want %v (%v)", node, n.Spec.Unschedulable, want, err)
		}
	}
}

// TestDefragClearsNoSpace: etcd-defrag runs while NOSPACE is raised (the
// alarm does not hold it back), defragments every member and disarms the
// alarm once no member is over its quota; if the data in use is over the
// quota even then, the last step fails saying so.
func TestDefragClearsNoSpace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inUse int64
		want  v1alpha1.OperationPhase
	}{{"fragmentation over the quota", 1000, v1alpha1.OperationSucceeded}, {"data over the quota", 2500, v1alpha1.OperationFailed}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, started("defrag", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationEtcdDefrag}))
			for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
				n := f.node(name)
				n.DBSize, n.DBSizeInUse, n.Quota, n.NoSpace = 3000, tc.inUse, 2000, true
			}
			op := f.run("defrag")
			if op.Status.Phase != tc.want {
				t.Fatalf("ended %s, want %s: %+v", op.Status.Phase, tc.want, op.Status.Steps)
			}
			last := op.Status.Steps[len(op.Status.Steps)-1]
			switch tc.want {
			case v1alpha1.OperationSucceeded:
				if !strings.Contains(op.Status.Steps[0].Message, "stays raised until the other members are defragmented") ||
					!strings.Contains(last.Message, "disarmed NOSPACE") {
					t.Errorf("steps %+v", op.Status.Steps)
				}
				for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
					if f.node(name).NoSpace || f.node(name).DBSize != tc.inUse {
						t.Errorf("%s: %+v", name, f.node(name))
					}
				}
			default:
				if !strings.Contains(last.Message, "over etcd's quota") {
					t.Errorf("last step %+v", last)
				}
			}
		})
	}
}

// TestUpgradePullsAhead: while a node reboots into its upgrade, the next
// two nodes pull their installer already; each step still pulls before it
// upgrades (an image present is quick to pull), so a pre-pull lost costs
// only time.
func TestUpgradePullsAhead(t *testing.T) {
	f := newFixture(t, started("upgrade", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationTalosUpgrade,
		TalosUpgrade: &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}}))
	ctx := context.Background()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "upgrade"}}
	const pull = "pull siderolabs/installer:v1.13.1"
	var order []string // the machines in step order
	for range 20 {
		if _, err := f.r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		f.r.prepulls.wait()
		if order == nil {
			for _, rec := range f.get("upgrade").Status.Steps {
				order = append(order, rec.Machine)
			}
		}
		if len(order) > 0 && f.node(order[0]).Stage != "running" {
			break
		}
	}
	if len(order) != len(machineNames) || f.node(order[0]).Stage == "running" {
		t.Fatalf("the first step never took its node away: steps %v", order)
	}
	// Its step followed while it is away: the next two pull, the third not.
	if _, err := f.r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	f.r.prepulls.wait()
	for i, name := range order[1:] {
		if got, want := slices.Contains(f.node(name).Calls, pull), i < prepullAhead; got != want {
			t.Errorf("%s pulled ahead: %v, want %v (calls %v)", name, got, want, f.node(name).Calls)
		}
		if slices.ContainsFunc(f.node(name).Calls, func(c string) bool { return strings.HasPrefix(c, "upgrade") }) {
			t.Errorf("%s upgraded ahead of its step: %v", name, f.node(name).Calls)
		}
	}
	if op := f.run("upgrade"); op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, name := range machineNames {
		if n := f.node(name); n.TalosVersion != "v1.13.1" || !slices.Contains(n.Calls, "upgrade siderolabs/installer:v1.13.1") {
			t.Errorf("%s runs %q, calls %v", name, n.TalosVersion, n.Calls)
		}
	}
}
