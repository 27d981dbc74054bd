package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/configstatus"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// The node-reset against the fixture's cluster: nodes that take Talos's
// reset modes (callDialer), machines whose status is written by its owners
// (intake, machineconfig) with server-side apply, and a stand-in for
// machineconfig that installs a forgotten machine's config again over the
// maintenance API, to the certificate pinned.

// resetFixture is the fixture with a node-reset started as "reset".
type resetFixture struct {
	*fixture
	d *callDialer
	// failMachineWrite, when positive, fails that (1-based) status write
	// of a TalosMachine by the reconciler, as a controller that crashed
	// before it would; machineWrites counts them.
	failMachineWrite, machineWrites int
	// states are the states each machine was written in, in order, as
	// "pin=<old|new|none> config=<bool>".
	states map[string][]string
	// installs counts the installs of each machine's config.
	installs map[string]int
	// evicted are the pods evicted, namespace/name.
	evicted []string
	// acceptedWrite is the (1-based) status write of the operation that
	// first records a node's acceptance of its reset.
	acceptedWrite int
}

func newResetFixture(t *testing.T, p *v1alpha1.NodeResetParameters, machines ...string) *resetFixture {
	t.Helper()
	return newResetFixtureOf(t, p, machineNames, machines...)
}

func newResetFixtureOf(t *testing.T, p *v1alpha1.NodeResetParameters, names []string, machines ...string) *resetFixture {
	t.Helper()
	ctx := context.Background()
	f := newFixtureOf(t, started("reset", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationNodeReset,
		Machines: machines, NodeReset: p}), names)
	rf := &resetFixture{fixture: f, d: newCallDialer(f), states: map[string][]string{}, installs: map[string]int{}}
	// Each machine's status as its owners wrote it: intake the pin of the
	// node's first contact and its hardware, machineconfig its config.
	for _, name := range names {
		var m v1alpha1.TalosMachine
		if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
			t.Fatal(err)
		}
		m.Status = v1alpha1.TalosMachineStatus{Approval: m.Status.Approval}
		if err := f.client.Status().Update(ctx, &m); err != nil {
			t.Fatal(err)
		}
		at := metav1.NewTime(now.Add(-time.Hour))
		m.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: certFingerprint("old-" + name), SeenAt: at}
		m.Status.Hardware = &v1alpha1.HardwareStatus{UUID: name, Disks: []v1alpha1.Disk{{Path: "/dev/sda"}, {Path: "/dev/sdb"}}}
		for _, c := range []string{v1alpha1.MachineConditionCertificateVerified, v1alpha1.MachineConditionReachable} {
			meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue,
				Reason: v1alpha1.MachineReasonContacted, Message: "contacted", LastTransitionTime: at})
		}
		if err := intake.WriteStatus(ctx, f.client, &m); err != nil {
			t.Fatal(err)
		}
		rf.configured(&m, at)
	}
	f.r.Client = interceptor.NewClient(f.client.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if op, ok := obj.(*v1alpha1.TalosOperation); ok && sub == "status" && rf.acceptedWrite == 0 &&
				slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool { return s.AcceptedAt != nil }) {
				rf.acceptedWrite = f.writes + 1 // the fixture counts it next
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			ac, ok := obj.(*ichorac.TalosMachineApplyConfiguration)
			if !ok || sub != "status" {
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			}
			rf.machineWrites++
			if rf.machineWrites == rf.failMachineWrite {
				return errors.New("injected: the controller stopped before this machine status write")
			}
			if err := c.SubResource(sub).Apply(ctx, obj, opts...); err != nil {
				return err
			}
			rf.record(*ac.Name)
			return nil
		},
	})
	f.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		rf.evicted = append(rf.evicted, ev.Namespace+"/"+ev.Name)
		return true, nil, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
	f.react = rf.resetReact
	return rf
}

// configured writes m's config as machineconfig does: applied at, Ready.
func (rf *resetFixture) configured(m *v1alpha1.TalosMachine, at metav1.Time) {
	rf.t.Helper()
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "h", AppliedAt: at}
	m.Status.Phase, m.Status.NodeName = v1alpha1.MachinePhaseReady, "node-"+m.Name
	for _, c := range []string{v1alpha1.MachineConditionConfigApplied, v1alpha1.MachineConditionReady} {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue,
			Reason: v1alpha1.MachineReasonRunning, Message: "running its config", LastTransitionTime: at})
	}
	if err := configstatus.WriteStatus(context.Background(), rf.client, m); err != nil {
		rf.t.Fatal(err)
	}
}

func (rf *resetFixture) machine(name string) *v1alpha1.TalosMachine {
	rf.t.Helper()
	var m v1alpha1.TalosMachine
	if err := rf.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
		rf.t.Fatal(err)
	}
	return &m
}

// pinOf says which certificate m pins: the old node's, the node's after
// its reset (new), or another.
func pinOf(m *v1alpha1.TalosMachine) string {
	switch p := m.Status.Maintenance; {
	case p == nil:
		return "none"
	case p.CertificateFingerprint == certFingerprint("old-"+m.Name):
		return "old"
	case p.CertificateFingerprint == certFingerprint(m.Name):
		return "new"
	}
	return "other"
}

// record notes the state a machine was written in. A machine without a
// config must never be seen with its old pin: intake, which looks at
// machines without one, would take the wiped node back to that.
func (rf *resetFixture) record(name string) {
	m := rf.machine(name)
	state := fmt.Sprintf("pin=%s config=%v", pinOf(m), m.Status.AppliedConfig != nil)
	if s := rf.states[name]; len(s) == 0 || s[len(s)-1] != state {
		rf.states[name] = append(s, state)
	}
	if m.Status.AppliedConfig == nil && pinOf(m) != "new" {
		rf.t.Errorf("%s was written without a config while it pins %s", name, pinOf(m))
	}
}

// resetReact plays machineconfig: a machine without a config, whose node at
// its address is in maintenance mode and presents the pinned certificate,
// gets its config installed, and is Ready once its node runs it.
func (rf *resetFixture) resetReact() {
	for _, name := range rf.names {
		m := rf.machine(name)
		n := rf.node(name)
		if m.Status.AppliedConfig != nil || n.Stage != "maintenance" || m.Status.Maintenance == nil ||
			m.Status.Maintenance.CertificateFingerprint != certFingerprint(n.UUID) {
			continue
		}
		n.Calls = append(n.Calls, "maintenance-apply")
		n.Installed, n.Stage, n.Config = true, "running", []byte("version: v1alpha1\nmachine:\n  type: worker\n")
		rf.installs[name]++
		rf.configured(m, metav1.NewTime(rf.clock))
		rf.record(name)
	}
}

func (rf *resetFixture) addPod(node string) {
	rf.t.Helper()
	if _, err := rf.kube.CoreV1().Pods("apps").Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec: corev1.PodSpec{NodeName: node}}, metav1.CreateOptions{}); err != nil {
		rf.t.Fatal(err)
	}
}

// TestNodeResetWipeModes: each wipe mode sends its Talos reset, once: a
// system disk wiped brings the node back through maintenance mode, its new
// certificate pinned and its config installed again; user disks wiped
// keep its config and pin, Ichor draining the node when graceful.
func TestNodeResetWipeModes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  *v1alpha1.NodeResetParameters
		want    talos.ResetRequest
		system  bool // the system disk is wiped
		drained bool // Ichor evicts the node's pods first
	}{
		{"default", nil, talos.ResetRequest{Mode: talos.WipeAll, Graceful: true}, true, false},
		{"all with user disks", &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeAll, UserDisks: []string{"/dev/sdb"}},
			talos.ResetRequest{Mode: talos.WipeAll, Graceful: true, UserDisks: []string{"/dev/sdb"}}, true, false},
		{"system-disk, not graceful", &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeSystemDisk, Graceful: ptr.To(false)},
			talos.ResetRequest{Mode: talos.WipeSystemDisk, Graceful: false}, true, false},
		{"user-disks", &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeUserDisks, UserDisks: []string{"/dev/sdb"}},
			talos.ResetRequest{Mode: talos.WipeUserDisks, Graceful: false, UserDisks: []string{"/dev/sdb"}}, false, true},
		{"user-disks, not graceful", &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeUserDisks, UserDisks: []string{"/dev/sdb"}, Graceful: ptr.To(false)},
			talos.ResetRequest{Mode: talos.WipeUserDisks, Graceful: false, UserDisks: []string{"/dev/sdb"}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := newResetFixture(t, tc.params, "worker-1")
			rf.addPod("node-worker-1")
			op := rf.run("reset")
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := rf.d.resets["worker-1"]; len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(tc.want) {
				t.Errorf("resets %+v, want one %+v", got, tc.want)
			}
			m := rf.machine("worker-1")
			wantPin, wantInstalls := "old", 0
			if tc.system {
				wantPin, wantInstalls = "new", 1
			}
			if pinOf(m) != wantPin || rf.installs["worker-1"] != wantInstalls || m.Status.AppliedConfig == nil || m.Status.Phase != v1alpha1.MachinePhaseReady {
				t.Errorf("worker-1 pins %s, installed %d times, config %+v, phase %s", pinOf(m), rf.installs["worker-1"], m.Status.AppliedConfig, m.Status.Phase)
			}
			if drained := slices.Equal(rf.evicted, []string{"apps/web"}); drained != tc.drained {
				t.Errorf("evicted %v, want drained by Ichor: %v", rf.evicted, tc.drained)
			}
			for _, name := range machineNames {
				if name != "worker-1" && len(rf.node(name).Calls) != 0 {
					t.Errorf("%s was asked %v", name, rf.node(name).Calls)
				}
			}
			if !rf.budgetFree() {
				t.Error("the budget is still held")
			}
			n, err := rf.kube.CoreV1().Nodes().Get(context.Background(), "node-worker-1", metav1.GetOptions{})
			if err != nil || n.Spec.Unschedulable {
				t.Errorf("Node node-worker-1 left cordoned: %v", err)
			}
		})
	}
}

// TestNodeResetSurvivesACrashAtEveryWrite: whichever status write of the
// operation or of the machine is lost, a reset of a control plane's
// system disk resets the node once, pins the certificate it presents
// after, before its config is forgotten (never a machine without a config
// that pins the old node's), installs the config once, and gives the
// budget back only when the node is back. A write is lost as one that
// fails does, the reconciler going on in the same process: that includes
// the write of the node's acceptance of its reset (what a crash there
// costs: TestNodeResetAcceptanceLostInACrash).
func TestNodeResetSurvivesACrashAtEveryWrite(t *testing.T) {
	for _, writer := range []string{"operation", "machine"} {
		t.Run(writer, func(t *testing.T) {
			total := 0
			for fail := 0; fail == 0 || fail <= total; fail++ {
				t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
					rf := newResetFixture(t, nil, "cp-2")
					awayFree := false
					rf.react = func() {
						if n := rf.node("cp-2"); n.Stage != "running" && rf.budgetFree() {
							awayFree = true
						}
						rf.resetReact()
					}
					if writer == "operation" {
						rf.failWrite = fail
					} else {
						rf.failMachineWrite = fail
					}
					op := rf.run("reset")
					if fail == 0 {
						total = rf.writes
						if writer == "machine" {
							total = rf.machineWrites
						}
						if rf.acceptedWrite == 0 {
							t.Fatal("no status write recorded the node's acceptance of its reset")
						}
					}
					if op.Status.Phase != v1alpha1.OperationSucceeded {
						t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
					}
					if got := rf.d.calls("cp-2"); !slices.Equal(got, []string{"reset graceful=true"}) {
						t.Errorf("cp-2 was asked %v", got)
					}
					if rf.installs["cp-2"] != 1 {
						t.Errorf("cp-2's config installed %d times", rf.installs["cp-2"])
					}
					want := []string{"pin=new config=true", "pin=new config=false", "pin=new config=true"}
					if got := rf.states["cp-2"]; !slices.Equal(got, want) {
						t.Errorf("cp-2 written as %v,\nwant %v", got, want)
					}
					if awayFree {
						t.Error("the budget was free while cp-2 was away")
					}
					if !rf.budgetFree() {
						t.Error("the budget is still held")
					}
					for _, name := range machineNames {
						if name != "cp-2" && len(rf.node(name).Calls) != 0 {
							t.Errorf("%s was asked %v", name, rf.node(name).Calls)
						}
					}
				})
			}
			if total < 2 {
				t.Fatalf("%d %s status writes: the crash points were not all exercised", total, writer)
			}
		})
	}
}

// TestNodeResetAcceptanceWriteFails: the write that records that the node
// accepted its reset fails (a conflict, an API server that does not
// answer). The node is resetting: the step stays Running with the budget
// held while the node is away, the write is made again, and the reset
// ends as one without the failure does; it is not failed with the write's
// error as if the node had refused its reset.
func TestNodeResetAcceptanceWriteFails(t *testing.T) {
	rf := newResetFixture(t, nil, "cp-2")
	awayFree := false
	rf.react = func() {
		if n := rf.node("cp-2"); n.Stage != "running" && rf.budgetFree() {
			awayFree = true
		}
		rf.resetReact()
	}
	// The operation's start, the step's begin, then the acceptance.
	rf.failWrite = 3
	for i := 0; i < 10 && rf.writes < 3; i++ {
		rf.once("reset")
	}
	if rf.acceptedWrite != 3 {
		t.Fatalf("the acceptance was write %d, not 3", rf.acceptedWrite)
	}
	op := rf.get("reset")
	if s := op.Status.Steps[0]; s.Phase != v1alpha1.OperationRunning || s.AcceptedAt != nil || rf.node("cp-2").Stage == "running" || rf.budgetFree() {
		t.Fatalf("after the failed write: step %+v, cp-2 %s, budget free %v", s, rf.node("cp-2").Stage, rf.budgetFree())
	}
	op = rf.run("reset")
	if s := op.Status.Steps[0]; op.Status.Phase != v1alpha1.OperationSucceeded || s.AcceptedAt == nil {
		t.Fatalf("ended %s: step %+v", op.Status.Phase, s)
	}
	if got := rf.d.calls("cp-2"); !slices.Equal(got, []string{"reset graceful=true"}) || rf.installs["cp-2"] != 1 || pinOf(rf.machine("cp-2")) != "new" {
		t.Errorf("cp-2 was asked %v, installed %d times, pins %s", got, rf.installs["cp-2"], pinOf(rf.machine("cp-2")))
	}
	if awayFree {
		t.Error("the budget was given back while cp-2 was resetting")
	}
	if !rf.budgetFree() {
		t.Error("the budget is still held")
	}
}

// TestNodeResetAcceptanceLostInACrash: the controller stops (its memory
// gone) before it wrote that the node accepted its reset, and the node is
// back in maintenance mode before the controller is: nothing tells that
// node from another answering at the address, so nothing is pinned, its
// config stays, and the step fails once StepTimeout passed, saying so.
func TestNodeResetAcceptanceLostInACrash(t *testing.T) {
	rf := newResetFixture(t, nil, "cp-2")
	rf.failWrite = 3
	for i := 0; i < 10 && rf.writes < 3; i++ {
		rf.once("reset")
	}
	if rf.acceptedWrite != 3 {
		t.Fatalf("the acceptance was write %d, not 3", rf.acceptedWrite)
	}
	rf.r.accepted, rf.r.followed = nil, nil // a new process
	rf.r.Options.StepTimeout = time.Minute
	op := rf.run("reset")
	if s := op.Status.Steps[0]; op.Status.Phase != v1alpha1.OperationFailed || s.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(s.Message, "without confirming its reset; nothing is pinned") {
		t.Fatalf("ended %s: step %+v", op.Status.Phase, s)
	}
	if m := rf.machine("cp-2"); pinOf(m) != "old" || m.Status.AppliedConfig == nil || rf.installs["cp-2"] != 0 {
		t.Errorf("cp-2 pins %s, config %+v, installed %d times", pinOf(m), m.Status.AppliedConfig, rf.installs["cp-2"])
	}
	if got := rf.d.calls("cp-2"); !slices.Equal(got, []string{"reset graceful=true"}) {
		t.Errorf("cp-2 was asked %v", got)
	}
}

// TestNodeResetRefusals: a reset Ichor could not bring the machine back
// from, or that would cost etcd, fails before any step, every node
// untouched.
func TestNodeResetRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		names   []string
		machine string
		params  *v1alpha1.NodeResetParameters
		setup   func(rf *resetFixture)
		want    string
	}{
		{name: "no system UUID on record", machine: "worker-1", setup: func(rf *resetFixture) {
			m := rf.machine("worker-1")
			m.Status.Hardware.UUID = ""
			if err := rf.client.Status().Update(context.Background(), m); err != nil {
				rf.t.Fatal(err)
			}
		}, want: "TalosMachine worker-1 has no system UUID on record"},
		{name: "a certificate pinned from the console", machine: "worker-1", setup: func(rf *resetFixture) {
			m := rf.machine("worker-1")
			m.Spec.ExpectedFingerprint = certFingerprint("console")
			if err := rf.client.Update(context.Background(), m); err != nil {
				rf.t.Fatal(err)
			}
		}, want: "TalosMachine worker-1 pins the certificate its console showed"},
		{name: "the only control plane", names: []string{"cp-1", "worker-1"}, machine: "cp-1",
			want: "TalosMachine cp-1 is the only control plane of TalosCluster demo"},
		{name: "a control plane not graceful", machine: "cp-2", params: &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeAll, Graceful: ptr.To(false)},
			want: "graceful: false would leave TalosMachine cp-2's etcd member behind"},
		{name: "the install disk as a user disk", machine: "worker-1",
			params: &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeUserDisks, UserDisks: []string{"/dev/sda"}},
			want:   "/dev/sda is the install disk of TalosMachine worker-1"},
		{name: "a disk the machine does not have", machine: "worker-1",
			params: &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeUserDisks, UserDisks: []string{"/dev/sdz"}},
			want:   "TalosMachine worker-1 has no disk /dev/sdz (it reports /dev/sda, /dev/sdb)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.names
			if names == nil {
				names = machineNames
			}
			rf := newResetFixtureOf(t, tc.params, names, tc.machine)
			if tc.setup != nil {
				tc.setup(rf)
			}
			op := rf.run("reset")
			c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
			if op.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
				!strings.Contains(c.Message, tc.want) || len(op.Status.Steps) != 0 {
				t.Fatalf("ended %s, condition %+v, steps %v; want PrecheckFailed saying %q", op.Status.Phase, c, stepNamesOf(op), tc.want)
			}
			for _, name := range names {
				if n := rf.node(name); len(n.Calls) != 0 || n.Stage != "running" {
					t.Errorf("%s: stage %s, calls %v", name, n.Stage, n.Calls)
				}
			}
		})
	}
}

// TestNodeResetPinsOnlyItsOwnNode: after a system-disk wipe, a node that
// answers at the machine's address in maintenance mode with another
// system UUID is not pinned, the machine's config is not forgotten, and
// nothing is sent to it: the step fails saying so.
func TestNodeResetPinsOnlyItsOwnNode(t *testing.T) {
	rf := newResetFixture(t, nil, "worker-1")
	impostor := &talostest.Node{UUID: "impostor", Stage: "maintenance"}
	rf.react = func() {
		if rf.node("worker-1").Stage == "maintenance" && rf.node("worker-1") != impostor {
			rf.dialer.Nodes["worker-1:50000"] = impostor
		}
		rf.resetReact()
	}
	op := rf.run("reset")
	if op.Status.Phase != v1alpha1.OperationFailed || len(op.Status.Steps) != 1 || op.Status.Steps[0].Phase != v1alpha1.OperationFailed ||
		!strings.Contains(op.Status.Steps[0].Message, "the node answering at worker-1:50000 has system UUID impostor, not worker-1") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status.Steps)
	}
	m := rf.machine("worker-1")
	if pinOf(m) != "old" || m.Status.AppliedConfig == nil {
		t.Errorf("worker-1 pins %s, config %+v", pinOf(m), m.Status.AppliedConfig)
	}
	if len(impostor.Calls) != 0 || rf.installs["worker-1"] != 0 {
		t.Errorf("the impostor was asked %v; installs %d", impostor.Calls, rf.installs["worker-1"])
	}
	if !rf.budgetFree() {
		t.Error("the budget is still held after the step failed")
	}
}

// TestNodeResetBudget: a reset waits for the budget another holds, and a
// control plane's waits while etcd would lose its quorum without it;
// meanwhile nothing is sent to the node.
func TestNodeResetBudget(t *testing.T) {
	t.Run("held by another", func(t *testing.T) {
		rf := newResetFixture(t, nil, "worker-1")
		c := rf.cluster()
		c.Status.Disruption = &v1alpha1.DisruptionStatus{Machine: "cp-3", MachineUID: "uid-cp-3", Action: v1alpha1.DisruptionReboot, Since: metav1.NewTime(now)}
		if err := rf.client.Status().Update(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			rf.once("reset")
		}
		op := rf.get("reset")
		cond := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionProgressing)
		if op.Status.Steps[0].Phase != v1alpha1.OperationPending || cond == nil || cond.Reason != v1alpha1.OperationReasonWaitingForBudget ||
			!strings.Contains(cond.Message, "held by cp-3") {
			t.Fatalf("step %+v, Progressing %+v", op.Status.Steps[0], cond)
		}
		if calls := rf.node("worker-1").Calls; len(calls) != 0 {
			t.Errorf("worker-1 was asked %v while another held the budget", calls)
		}
		c = rf.cluster()
		c.Status.Disruption = nil
		if err := rf.client.Status().Update(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if op := rf.run("reset"); op.Status.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("once the budget was free: %+v", op.Status)
		}
	})
	t.Run("quorum", func(t *testing.T) {
		rf := newResetFixture(t, nil, "cp-1")
		rf.node("cp-3").Etcd = false // its member is down
		// Started past the health check, so that only quorum decides.
		op := rf.get("reset")
		meta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{Type: v1alpha1.OperationConditionHealthOverridden, Status: metav1.ConditionTrue,
			Reason: v1alpha1.OperationReasonOverridden, LastTransitionTime: metav1.NewTime(now)})
		if err := rf.client.Status().Update(context.Background(), op); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			rf.once("reset")
		}
		op = rf.get("reset")
		if len(op.Status.Steps) != 1 || op.Status.Steps[0].Phase != v1alpha1.OperationPending ||
			!strings.Contains(op.Status.Steps[0].Message, "etcd would lose its quorum without cp-1") {
			t.Fatalf("phase %s, steps %+v", op.Status.Phase, op.Status.Steps)
		}
		if calls := rf.node("cp-1").Calls; len(calls) != 0 || !rf.budgetFree() {
			t.Errorf("cp-1 was asked %v; budget free %v", calls, rf.budgetFree())
		}
	})
}
