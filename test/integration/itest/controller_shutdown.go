package itest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/talossim"
)

// TalosCordoned is the annotation Talos marks a Node it cordoned with.
const TalosCordoned = "talos.dev/cordoned"

// shutdowns: an admin shuts a worker down (Talos drains it) and powers it
// on again, an operator may not, a node-shutdown that would cost etcd its
// quorum is refused, and an admin shuts the whole cluster down — a backup
// first, then the workers, then the control planes — and brings it back by
// powering the machines on.
func (d *DemoCluster) Shutdowns(t *testing.T) {
	ctx := d.Ctx
	wl := d.WorkloadClient(t)
	d.PodOn(t, wl, "app", "worker-1")
	allRunning := func(t *testing.T) {
		t.Helper()
		for name, n := range d.Nodes {
			if n.Phase() != talossim.PhaseRunning {
				t.Errorf("%s is %s, want running", name, n.Phase())
			}
		}
	}

	d.CreateOperation(t, Operator, "off-worker-1", "clusterName: demo\ntype: node-shutdown\nmachines: [worker-1]")
	out, err := CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/off-worker-1/start", "-f", "-")...)
	if err == nil || !strings.Contains(out+err.Error(), "forbidden") {
		t.Fatalf("an operator started a node-shutdown: %v\n%s", err, out)
	}

	d.CreateOperation(t, Admin, "off-two-cps", "clusterName: demo\ntype: node-shutdown\nmachines: [cp-1, cp-2]")
	d.StartOperation(t, Admin, "off-two-cps")
	refused := d.WaitOperationEnds(t, "off-two-cps", v1alpha1.OperationFailed)
	if c := meta.FindStatusCondition(refused.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil ||
		c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, "would leave etcd without a quorum (2 needed)") ||
		!strings.Contains(c.Message, "type shutdown") {
		t.Errorf("two of three control planes: %s", DescribeOperation(refused))
	}
	allRunning(t)

	// An admin shuts worker-1 down: Talos drains it first.
	since := time.Now()
	d.StartOperation(t, Admin, "off-worker-1")
	op := d.WaitOperationEnds(t, "off-worker-1", v1alpha1.OperationSucceeded)
	if w := d.Nodes["worker-1"]; w.Phase() != talossim.PhaseShutdown {
		t.Fatalf("worker-1 is %s after its shutdown: %s", w.Phase(), DescribeOperation(op))
	}
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("%d nodes went away (%s), want worker-1 only", most, when)
	}
	if _, err := wl.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod on worker-1 outlived its drain: %v", err)
	}
	node, err := wl.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable || node.Annotations[TalosCordoned] != "true" {
		t.Errorf("worker-1's Node while off: %v, want cordoned by Talos", err)
	}
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	WaitEventSaying(ctx, t, d.Ns, "off-worker-1", corev1.EventTypeNormal, "StepSucceeded", "worker-1: powered off")
	WaitEventSaying(ctx, t, d.Ns, "worker-1", corev1.EventTypeNormal, "PoweredOff", "TalosOperation off-worker-1 powered the node at")
	WaitMachine(ctx, t, d.Ns, "worker-1", "Unreachable while off", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseUnreachable
	})

	if err := d.Nodes["worker-1"].PowerOn(); err != nil {
		t.Fatal(err)
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	if err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		n, err := wl.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable && n.Annotations[TalosCordoned] == "", nil
	}); err != nil {
		t.Errorf("worker-1's Node is not uncordoned after its boot: %v", err)
	}

	// The whole cluster: a backup, the workers, then the control planes.
	if _, err := wl.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before-shutdown"}, Data: map[string]string{"v": "kept"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	offs := map[string]int{}
	for name, n := range d.Nodes {
		offs[name] = TimesEntered(n, talossim.PhaseShutdown)
	}
	d.CreateOperation(t, Admin, "off-all", "clusterName: demo\ntype: shutdown\nmaxUnavailable: 2")
	// The controller is stopped while a control plane's shutdown is in
	// flight, and started again: every node is shut down exactly once.
	inFlight := d.StartWatching(t, Admin, "off-all", "a control plane's shutdown running", func(op *v1alpha1.TalosOperation) bool {
		return slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
			return s.Action == "" && strings.HasPrefix(s.Machine, "cp-") && s.Phase == v1alpha1.OperationRunning
		})
	})
	d.Controller.Stop()
	t.Logf("stopped the controller during the shutdown at %s", DescribeOperation(inFlight))
	d.Controller = RunController(d.Parent, d.Tune)
	op = d.WaitOperationEnds(t, "off-all", v1alpha1.OperationSucceeded)
	for name, n := range d.Nodes {
		if got := TimesEntered(n, talossim.PhaseShutdown) - offs[name]; got != 1 {
			t.Errorf("%s was shut down %d times, want once", name, got)
		}
	}
	var names []string
	for _, s := range op.Status.Steps {
		names = append(names, s.Name())
	}
	if want := []string{"cp-1 backup", "worker-1", "worker-2", "cp-1", "cp-2", "cp-3"}; !slices.Equal(names, want) {
		t.Errorf("steps %v, want %v", names, want)
	}
	b, err := APIClient(t).IchorV1alpha1().TalosBackups(d.Ns).Get(ctx, "off-all", metav1.GetOptions{})
	if err != nil || b.Status.Phase != v1alpha1.BackupSucceeded || b.Annotations[v1alpha1.AnnotationOperation] != string(op.UID) {
		t.Fatalf("the shutdown's backup: %v %+v", err, b)
	}
	offAt := map[string]time.Time{}
	for name, n := range d.Nodes {
		if n.Phase() != talossim.PhaseShutdown {
			t.Errorf("%s is %s after the shutdown", name, n.Phase())
		}
		for _, c := range n.PhaseChanges() {
			if c.Phase == talossim.PhaseShutdown && c.At.After(since) {
				offAt[name] = c.At
			}
		}
		if offAt[name].Before(b.Status.CompletedAt.Time) {
			t.Errorf("%s went off at %s, before the backup ended at %s", name, offAt[name], b.Status.CompletedAt.Time)
		}
	}
	for _, w := range []string{"worker-1", "worker-2"} {
		for _, c := range []string{"cp-1", "cp-2", "cp-3"} {
			if !offAt[w].Before(offAt[c]) {
				t.Errorf("%s went off at %s, not before %s at %s", w, offAt[w], c, offAt[c])
			}
		}
	}
	WaitBudgetFree(ctx, t, d.Ns, "demo")

	// The way back: power every machine on, control planes first.
	for _, name := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"} {
		if err := d.Nodes[name].PowerOn(); err != nil {
			t.Fatalf("power on %s: %v", name, err)
		}
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	// The cluster's status may say Ready from before the shutdown for a
	// moment: the data is checked once its Kubernetes API answers again.
	var cm *corev1.ConfigMap
	if err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		var err error
		cm, err = wl.CoreV1().ConfigMaps("default").Get(ctx, "before-shutdown", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err // the API answers, without the data
		}
		return err == nil, nil
	}); err != nil || cm.Data["v"] != "kept" {
		t.Errorf("the ConfigMap written before the shutdown: %v %v", err, cm)
	}
	out = MustKubectl(ctx, t, append(Admin, "get", "talosoperations", "-n", d.Ns, "off-all")...)
	if !strings.Contains(out, "6/6") || !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl get talosoperations:\n%s", out)
	}
}

// nodeResets: node-resets an admin starts and an operator may not; the
// refusals before any node is touched; a user-disks wipe that keeps the
// node's config; and a wipe of the system disks of a control plane and a
// worker, each back in maintenance mode with a new certificate that Ichor
// pins, installed again and Ready, with a controller stopped in between.
func (d *DemoCluster) NodeResets(t *testing.T) {
	ctx := d.Ctx
	untouched := func(t *testing.T, resets map[string]int) {
		t.Helper()
		for name, n := range d.Nodes {
			if got := TimesEntered(n, talossim.PhaseResetting); got != resets[name] {
				t.Errorf("%s was reset %d times, want %d", name, got, resets[name])
			}
		}
	}
	resets := func() map[string]int {
		out := map[string]int{}
		for name, n := range d.Nodes {
			out[name] = TimesEntered(n, talossim.PhaseResetting)
		}
		return out
	}
	before := resets()

	if out, err := CP.KubectlWithInput(ctx, []byte(fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: no-disks, namespace: %s}
spec: {clusterName: demo, type: node-reset, machines: [worker-2], nodeReset: {wipe: user-disks}}
`, d.Ns)), append(Admin, "create", "-f", "-")...); err == nil || !strings.Contains(out+err.Error(), "spec.nodeReset.userDisks: Required value") {
		t.Errorf("a user-disks reset naming no disk: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, spec, want string }{
		{"cp-not-graceful", "machines: [cp-1]\nnodeReset: {graceful: false}", "graceful: false would leave TalosMachine cp-1's etcd member behind"},
		{"no-such-disk", "machines: [worker-1]\nnodeReset: {wipe: user-disks, userDisks: [/dev/sdb]}", "TalosMachine worker-1 has no disk /dev/sdb (it reports /dev/sda)"},
		{"install-disk", "machines: [worker-2]\nnodeReset: {userDisks: [/dev/sda]}", "/dev/sda is the install disk of TalosMachine worker-2"},
	} {
		d.CreateOperation(t, Admin, c.name, "clusterName: demo\ntype: node-reset\n"+c.spec)
		d.StartOperation(t, Admin, c.name)
		op := d.WaitOperationEnds(t, c.name, v1alpha1.OperationFailed)
		if cond := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); cond == nil ||
			cond.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(cond.Message, c.want) {
			t.Errorf("%s: want PrecheckFailed saying %q: %s", c.name, c.want, DescribeOperation(op))
		}
	}
	d.CreateOperation(t, Operator, "wipe-sdb", "clusterName: demo\ntype: node-reset\nmachines: [worker-2]\nnodeReset: {wipe: user-disks, userDisks: [/dev/sdb]}")
	out, err := CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/wipe-sdb/start", "-f", "-")...)
	if err == nil || !strings.Contains(out+err.Error(), "forbidden") {
		t.Fatalf("an operator started a node-reset: %v\n%s", err, out)
	}
	untouched(t, before)

	// A pod on each worker: Ichor drains worker-2 before its user-disks
	// reset, Talos drains worker-1 in its graceful reset of the system disk.
	wl := d.WorkloadClient(t)
	for _, node := range []string{"worker-1", "worker-2"} {
		d.PodOn(t, wl, "app-on-"+node, node)
	}
	drained := func(t *testing.T, node string) {
		t.Helper()
		if _, err := wl.CoreV1().Pods("default").Get(ctx, "app-on-"+node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the pod on %s outlived its reset's drain: %v", node, err)
		}
		if err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
			n, err := wl.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && !n.Spec.Unschedulable, nil
		}); err != nil {
			t.Errorf("%s's Node is still cordoned after its reset: %v", node, err)
		}
	}

	// user-disks: /dev/sdb is wiped, the node keeps its config.
	w2 := d.Nodes["worker-2"]
	hashBefore := GetMachine(t, d.Ns, "worker-2").Status.AppliedConfig.Hash
	maintenanceBefore := TimesEntered(w2, talossim.PhaseMaintenance)
	d.StartOperation(t, Admin, "wipe-sdb")
	op := d.WaitOperationEnds(t, "wipe-sdb", v1alpha1.OperationSucceeded)
	if wipes := w2.DiskWipes(); wipes["/dev/sdb"] != 1 || wipes["/dev/sda"] != 0 {
		t.Errorf("disk wipes of worker-2: %v, want /dev/sdb once", wipes)
	}
	if r := w2.LastReset(); r.GetMode() != machineapi.ResetRequest_USER_DISKS || r.GetGraceful() || !r.GetReboot() ||
		!slices.Equal(r.GetUserDisksToWipe(), []string{"/dev/sdb"}) || len(r.GetSystemPartitionsToWipe()) > 0 {
		t.Errorf("worker-2's reset request: %v", r)
	}
	if TimesEntered(w2, talossim.PhaseMaintenance) != maintenanceBefore || GetMachine(t, d.Ns, "worker-2").Status.AppliedConfig.Hash != hashBefore {
		t.Errorf("a user-disks reset lost worker-2's config: %s", DescribeOperation(op))
	}
	drained(t, "worker-2")
	WaitBudgetFree(ctx, t, d.Ns, "demo")

	// all (the default): cp-2 and worker-1 come back in maintenance mode,
	// are pinned anew, installed again and Ready; the controller is stopped
	// while cp-2's step runs.
	pins := map[string]string{}
	for _, name := range []string{"cp-2", "worker-1"} {
		pins[name] = GetMachine(t, d.Ns, name).Status.Maintenance.CertificateFingerprint
	}
	before = resets()
	d.CreateOperation(t, Admin, "rebuild", "clusterName: demo\ntype: node-reset\nmachines: [cp-2, worker-1]")
	// Installing again takes longer than demo's short step timeout under
	// the race detector.
	resetTune := func(o *ctrlcmd.Options) {
		d.Tune(o)
		o.OperationStepTimeout = ClusterWait
	}
	// Stopped once the node accepted its reset: stopped before that, the
	// step fails safe without pinning anything (docs/operations.md, "Resetting a node").
	inFlight := d.StartWatching(t, Admin, "rebuild", "cp-2's reset accepted", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 0 && op.Status.Steps[0].Phase == v1alpha1.OperationRunning && op.Status.Steps[0].AcceptedAt != nil
	})
	d.Controller.Stop()
	t.Logf("stopped the controller during the reset at %s", DescribeOperation(inFlight))
	d.Controller = RunController(d.Parent, resetTune)
	op = d.WaitOperationEnds(t, "rebuild", v1alpha1.OperationSucceeded)
	if got := StepOrder(op); !slices.Equal(got, []string{"cp-2", "worker-1"}) {
		t.Errorf("steps ran in the order %v", got)
	}
	for _, s := range op.Status.Steps {
		if s.AcceptedAt == nil || s.StartedAt == nil || s.AcceptedAt.Before(s.StartedAt) {
			t.Errorf("step %s: the node's acceptance of the reset is not on record: %+v", s.Name(), s)
		}
	}
	after := resets()
	for name, n := range d.Nodes {
		want := before[name]
		if name == "cp-2" || name == "worker-1" {
			want++
			if r := n.LastReset(); r.GetMode() != machineapi.ResetRequest_ALL || !r.GetGraceful() || len(r.GetSystemPartitionsToWipe()) > 0 {
				t.Errorf("%s's reset request: %v", name, r)
			}
			m := GetMachine(t, d.Ns, name)
			verified := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified)
			if m.Status.Maintenance.CertificateFingerprint == pins[name] || m.Status.Maintenance.CertificateFingerprint != n.MaintenanceFingerprint() ||
				verified == nil || verified.Reason != v1alpha1.MachineReasonPinnedAfterReset || m.Status.Phase != v1alpha1.MachinePhaseReady {
				t.Errorf("%s after its reset: pinned %s (was %s, the node presents %s), %+v, phase %s", name,
					m.Status.Maintenance.CertificateFingerprint, pins[name], n.MaintenanceFingerprint(), verified, m.Status.Phase)
			}
			WaitEventSaying(ctx, t, d.Ns, name, corev1.EventTypeNormal, "CertificateRepinned", "after TalosOperation rebuild wiped the node")
		}
		if after[name] != want {
			t.Errorf("%s was reset %d times, want %d", name, after[name]-before[name], want-before[name])
		}
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	drained(t, "worker-1")
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, d.Tune)
}

// GetMachine reads TalosMachine name.
func GetMachine(t *testing.T, ns, name string) *v1alpha1.TalosMachine {
	t.Helper()
	m, err := APIClient(t).IchorV1alpha1().TalosMachines(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
