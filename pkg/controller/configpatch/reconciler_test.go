package configpatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// The status of TalosConfigPatches against a fake client: a cluster of a
// control plane and two workers (approved), a worker not approved and a
// machine of another cluster, and the patches a test adds.

const ns = "ns"

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// bundle is the secrets bundle every fixture shares: generating one takes a while.
var (
	bundleOnce sync.Once
	bundle     []byte
	bundleErr  error
)

type fixture struct {
	t      *testing.T
	client client.Client
	r      *Reconciler
	// statusWrites counts the status writes of patches.
	statusWrites int
}

func machine(name, cluster string, role v1alpha1.MachineRole, approved bool, labels map[string]string) *v1alpha1.TalosMachine {
	m := &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Generation: 1},
		Spec: v1alpha1.TalosMachineSpec{ClusterName: cluster, Role: role, Address: name + ":50000", Hostname: name,
			Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
	}
	if approved {
		m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "olivia"}
	}
	return m
}

func newFixture(t *testing.T, patches ...*v1alpha1.TalosConfigPatch) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	bundleOnce.Do(func() { bundle, bundleErr = secretsbundle.Generate("v1.13.0", now) })
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns, UID: "uid-demo", Generation: 1},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
			Network:      v1alpha1.ClusterNetwork{PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/12"}, DNSDomain: "cluster.local"}},
		Status: v1alpha1.TalosClusterStatus{SecretsDigest: secretsbundle.Digest(bundle)},
	}
	objs := []client.Object{cluster,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: ns},
			Data: map[string][]byte{secretsbundle.BundleKey: bundle}},
		machine("cp-1", "demo", v1alpha1.MachineRoleControlPlane, true, map[string]string{"zone": "a"}),
		machine("worker-1", "demo", v1alpha1.MachineRoleWorker, true, map[string]string{"zone": "a"}),
		machine("worker-2", "demo", v1alpha1.MachineRoleWorker, true, map[string]string{"zone": "b"}),
		machine("worker-3", "demo", v1alpha1.MachineRoleWorker, false, map[string]string{"zone": "a"}), // not approved
		machine("elsewhere", "other", v1alpha1.MachineRoleWorker, true, map[string]string{"zone": "a"}),
	}
	for _, p := range patches {
		objs = append(objs, p)
	}
	f := &fixture{t: t}
	index := func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} }
	f.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosMachine{}, &v1alpha1.TalosConfigPatch{}).
		WithIndex(&v1alpha1.TalosMachine{}, clusterindex.Field, index).
		WithIndex(&v1alpha1.TalosConfigPatch{}, clusterindex.Field, index).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				f.statusWrites++
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			},
		}).Build()
	f.r = &Reconciler{Client: f.client, Secrets: f.client, Now: func() time.Time { return now }}
	return f
}

func patch(name string, target v1alpha1.PatchTarget, text string) *v1alpha1.TalosConfigPatch {
	return &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 3},
		Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: "demo", Target: target, Patch: text},
	}
}

// reconcile reconciles the patch and returns it as stored.
func (f *fixture) reconcile(name string) (ctrl.Result, *v1alpha1.TalosConfigPatch) {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	var p v1alpha1.TalosConfigPatch
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		f.t.Fatal(err)
	}
	return res, &p
}

// applied records on machine the config it renders to with the cluster's
// patches as stored now, as machineconfig does once it applied it.
func (f *fixture) applied(name string) {
	f.t.Helper()
	ctx := context.Background()
	var m v1alpha1.TalosMachine
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
		f.t.Fatal(err)
	}
	var cluster v1alpha1.TalosCluster
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: m.Spec.ClusterName}, &cluster); err != nil {
		f.t.Fatal(err)
	}
	secrets, err := bundlestore.Load(ctx, f.client, &cluster)
	if err != nil {
		f.t.Fatal(err)
	}
	var patches v1alpha1.TalosConfigPatchList
	if err := f.client.List(ctx, &patches, clusterindex.InCluster(ns, cluster.Name)...); err != nil {
		f.t.Fatal(err)
	}
	rendered, err := f.r.render(&cluster, &m, patches.Items, secrets, nil)
	if err != nil {
		f.t.Fatalf("render %s: %v", name, err)
	}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, AppliedAt: metav1.NewTime(now)}
	if err := f.client.Status().Update(ctx, &m); err != nil {
		f.t.Fatal(err)
	}
}

// condition is the status, reason and message of p's condType condition:
// reason "absent" when p has none, and the message says so when it is of
// another generation.
func condition(p *v1alpha1.TalosConfigPatch, condType string) (metav1.ConditionStatus, string, string) {
	c := meta.FindStatusCondition(p.Status.Conditions, condType)
	if c == nil {
		return "", "absent", ""
	}
	if c.ObservedGeneration != p.Generation {
		return c.Status, c.Reason, fmt.Sprintf("observed generation %d, not %d", c.ObservedGeneration, p.Generation)
	}
	return c.Status, c.Reason, c.Message
}

// want checks one condition of p.
func want(t *testing.T, p *v1alpha1.TalosConfigPatch, condType string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	gotStatus, gotReason, gotMessage := condition(p, condType)
	if gotStatus != status || gotReason != reason || !strings.Contains(gotMessage, message) {
		t.Errorf("%s: %s %s %q, want %s %s saying %q", condType, gotStatus, gotReason, gotMessage, status, reason, message)
	}
}

const certSAN = "machine:\n  certSANs:\n    - talos.example.com\n"

// TestPatchRollsOut: a patch that renders is Valid on the machines it
// targets (approved members of its cluster), says the effect of its
// change, and is Applied on each once the machine's applied config is the
// one rendered with it, all of them at the end.
func TestPatchRollsOut(t *testing.T) {
	f := newFixture(t, patch("sans", v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleWorker}, certSAN))
	res, p := f.reconcile("sans")
	if !res.IsZero() || p.Status.ObservedGeneration != 3 {
		t.Errorf("result %+v, observed generation %d", res, p.Status.ObservedGeneration)
	}
	want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders, "renders into the configs of 2 targeted machines")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonRollingOut, "applied on 0 of 2 machines; waiting for worker-1, worker-2")
	if p.Status.Effect != v1alpha1.ConfigEffectNoReboot || len(p.Status.AppliedMachines) != 0 {
		t.Errorf("effect %s, applied on %v", p.Status.Effect, p.Status.AppliedMachines)
	}

	f.applied("worker-1")
	_, p = f.reconcile("sans")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonRollingOut, "applied on 1 of 2 machines; waiting for worker-2")
	if !slices.Equal(p.Status.AppliedMachines, []string{"worker-1"}) || p.Status.Effect != v1alpha1.ConfigEffectNoReboot {
		t.Errorf("applied on %v, effect %s", p.Status.AppliedMachines, p.Status.Effect)
	}

	f.applied("worker-2")
	_, p = f.reconcile("sans")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionTrue, v1alpha1.PatchReasonAllApplied, "applied on all 2 targeted machines")
	if !slices.Equal(p.Status.AppliedMachines, []string{"worker-1", "worker-2"}) {
		t.Errorf("applied on %v", p.Status.AppliedMachines)
	}

	// Nothing changed: nothing is written.
	writes := f.statusWrites
	f.reconcile("sans")
	if f.statusWrites != writes {
		t.Errorf("%d status writes for an unchanged status", f.statusWrites-writes)
	}
}

// TestPatchTargets: a patch targets the approved machines of its cluster
// its target selects: every one, a role, named machines, a selector.
func TestPatchTargets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target v1alpha1.PatchTarget
		want   string
	}{
		{"the whole cluster", v1alpha1.PatchTarget{}, "waiting for cp-1, worker-1, worker-2"},
		{"a role", v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleControlPlane}, "waiting for cp-1"},
		{"named machines", v1alpha1.PatchTarget{Machines: []string{"worker-2", "worker-3", "elsewhere"}}, "waiting for worker-2"},
		{"a selector", v1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}}, "waiting for cp-1, worker-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, patch("sans", tc.target, certSAN))
			_, p := f.reconcile("sans")
			want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonRollingOut, tc.want)
			_, _, msg := condition(p, v1alpha1.PatchConditionApplied)
			if !strings.HasSuffix(msg, tc.want) {
				t.Errorf("Applied says %q", msg)
			}
		})
	}

	t.Run("none", func(t *testing.T) {
		f := newFixture(t, patch("sans", v1alpha1.PatchTarget{Machines: []string{"worker-3"}}, certSAN))
		_, p := f.reconcile("sans")
		want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders, "renders into the configs of 0 targeted machines")
		want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonNoTargets, "no approved machine of cluster demo is targeted")
	})
	t.Run("a target that cannot be evaluated", func(t *testing.T) {
		f := newFixture(t, patch("sans", v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleWorker, Machines: []string{"worker-1"}}, certSAN))
		_, p := f.reconcile("sans")
		want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionFalse, "InvalidTarget", "target sets more than one of role, machines and selector")
		want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the patch is not valid")
	})
}

// TestPatchThatDoesNotRender: a patch that does not parse, or that breaks
// the config, is not Valid, saying for which machine and why, and no
// machine gets it; a patch whose machines another patch breaks is Blocked,
// naming them.
func TestPatchThatDoesNotRender(t *testing.T) {
	for _, tc := range []struct {
		name, text, reason, message string
	}{
		{"not YAML", "machine: [certSANs\n", "ParseFailed", "machine worker-1: "},
		{"an unknown field", "machine:\n  kubelett: {}\n", "ParseFailed", "kubelett"},
		{"a path the config does not have", `[{"op": "remove", "path": "/machine/nothingHere"}]`, "ApplyFailed", "machine worker-1: "},
		{"a config that is not valid", "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n", "InvalidResult",
			"'auto' and 'hostname' cannot be set at the same time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, patch("broken", v1alpha1.PatchTarget{Machines: []string{"worker-1"}}, tc.text))
			_, p := f.reconcile("broken")
			want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionFalse, tc.reason, tc.message)
			want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the patch does not render; no machine gets it")
			if len(p.Status.AppliedMachines) != 0 {
				t.Errorf("applied on %v", p.Status.AppliedMachines)
			}
		})
	}

	t.Run("blocked by another", func(t *testing.T) {
		f := newFixture(t, patch("sans", v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleWorker}, certSAN),
			patch("broken", v1alpha1.PatchTarget{Machines: []string{"worker-2"}}, "machine: [certSANs\n"))
		_, p := f.reconcile("sans")
		want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders, "2 targeted machines")
		want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the configs of these machines do not render: worker-2 (")
		if _, _, msg := condition(p, v1alpha1.PatchConditionApplied); strings.Contains(msg, "worker-1") {
			t.Errorf("Applied names worker-1, which renders: %q", msg)
		}
	})
}

// encryptState turns the encryption of STATE on: Talos sets it only when it
// formats the volume.
const encryptState = "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      tpm: {}\n"

// TestPatchThatNeedsAReset: a patch an installed machine cannot take
// without a reset is ResetRequired for it, saying which field and what to
// do; a machine not installed yet takes it with its install.
func TestPatchThatNeedsAReset(t *testing.T) {
	f := newFixture(t)
	f.applied("worker-1") // installed without the patch
	if err := f.client.Create(context.Background(), patch("encrypt", v1alpha1.PatchTarget{Role: v1alpha1.MachineRoleWorker}, encryptState)); err != nil {
		t.Fatal(err)
	}
	_, p := f.reconcile("encrypt")
	want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders, "2 targeted machines")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonResetRequired,
		"installed machines worker-1 take it only after a node-reset: VolumeConfig/STATE:encryption")
	if _, _, msg := condition(p, v1alpha1.PatchConditionApplied); !strings.Contains(msg, "node-reset TalosOperation") || strings.Contains(msg, "worker-2") {
		t.Errorf("Applied says %q", msg)
	}

	// Installed with it (a node-reset), worker-1 no longer needs one.
	f.applied("worker-1")
	_, p = f.reconcile("encrypt")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonRollingOut, "applied on 1 of 2 machines; waiting for worker-2")
}

// TestPatchDisabledOrOrphaned: a disabled patch is Valid but renders
// nowhere; a patch of a cluster that does not exist waits for it.
func TestPatchDisabledOrOrphaned(t *testing.T) {
	disabled := patch("off", v1alpha1.PatchTarget{}, "machine: [certSANs\n")
	disabled.Spec.Disabled = true
	orphan := patch("orphan", v1alpha1.PatchTarget{}, certSAN)
	orphan.Spec.ClusterName = "gone"
	f := newFixture(t, disabled, orphan)

	_, p := f.reconcile("off")
	want(t, p, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonDisabled, "the patch is disabled and not rendered")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonDisabled, "the patch is disabled")

	res, p := f.reconcile("orphan")
	want(t, p, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonClusterNotFound, "TalosCluster gone does not exist")
	if res.RequeueAfter != retryInterval {
		t.Errorf("result %+v, want a retry after %s", res, retryInterval)
	}
}

// TestDeletedPatch: a patch being deleted, or gone, is not written.
func TestDeletedPatch(t *testing.T) {
	deleting := patch("deleting", v1alpha1.PatchTarget{}, certSAN)
	deleting.Finalizers = []string{"example.com/hold"}
	f := newFixture(t, deleting)
	ctx := context.Background()
	if err := f.client.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deleting", "gone"} {
		res, err := f.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		if err != nil || !res.IsZero() {
			t.Errorf("%s: result %+v, error %v", name, res, err)
		}
	}
	if f.statusWrites != 0 {
		t.Errorf("%d status writes", f.statusWrites)
	}
	var p v1alpha1.TalosConfigPatch
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "deleting"}, &p); err != nil || len(p.Status.Conditions) != 0 {
		t.Errorf("the deleted patch: %+v, %v", p.Status, err)
	}
}
