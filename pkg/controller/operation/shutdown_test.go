package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// calls counts the calls of node name that start with prefix.
func (f *fixture) calls(name, prefix string) int {
	return len(slices.DeleteFunc(slices.Clone(f.node(name).Calls), func(c string) bool { return !strings.HasPrefix(c, prefix) }))
}

// TestNodeShutdownSurvivesACrashAtEveryWrite: whichever status write is
// lost, a node-shutdown powers each named node off exactly once, Talos
// draining it (not forced) and never asked again while it drains, and
// touches no other.
func TestNodeShutdownSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, started("off", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationNodeShutdown,
				Machines: []string{"worker-1", "cp-3"}}))
			// Talos drains for a while, and starts again if asked again.
			f.node("worker-1").DrainPolls, f.node("cp-3").DrainPolls = 3, 3
			f.failWrite = fail
			op := f.run("off")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := stepMachines(op); !slices.Equal(got, []string{"cp-3", "worker-1"}) {
				t.Errorf("steps %v", got)
			}
			for _, name := range machineNames {
				want, stage := 0, "running"
				if name == "cp-3" || name == "worker-1" {
					want, stage = 1, "off"
				}
				if n := f.node(name); f.calls(name, "shutdown force=false") != want || n.Stage != stage {
					t.Errorf("%s: stage %s, calls %v", name, n.Stage, n.Calls)
				}
			}
			if !f.budgetFree() {
				t.Error("the budget is still held")
			}
		})
	}
	// Start, two per node (begun, then waiting for its drain), the end.
	if total != 6 {
		t.Fatalf("%d status writes, want 6: the crash points were not all exercised", total)
	}
}

// TestNodeShutdownKeepsEtcdQuorum: shutting down two of three control
// planes is refused before any step.
func TestNodeShutdownKeepsEtcdQuorum(t *testing.T) {
	f := newFixture(t, started("off", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationNodeShutdown,
		Machines: []string{"cp-1", "cp-2"}}))
	op := f.run("off")
	c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded)
	if op.Status.Phase != v1alpha1.OperationFailed || c == nil || c.Reason != v1alpha1.OperationReasonPrecheckFailed ||
		!strings.Contains(c.Message, "shutting down 2 of the 3 control planes of TalosCluster demo would leave etcd without a quorum (2 needed)") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, c)
	}
	for _, name := range machineNames {
		if n := f.node(name); len(n.Calls) != 0 || n.Stage != "running" {
			t.Errorf("%s: stage %s, calls %v", name, n.Stage, n.Calls)
		}
	}
}

// withBackupSettings gives the fixture's cluster backup settings, and plays
// the backup runner: a TalosBackup created ends as phase says.
func (f *fixture) withBackupSettings(phase v1alpha1.BackupPhase, message string) {
	ctx := context.Background()
	var c v1alpha1.TalosCluster
	if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	c.Spec.Backup = &v1alpha1.ClusterBackup{Schedule: "@daily"}
	if err := f.client.Update(ctx, &c); err != nil {
		f.t.Fatal(err)
	}
	f.react = func() {
		var list v1alpha1.TalosBackupList
		if err := f.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			f.t.Fatal(err)
		}
		for i := range list.Items {
			b := &list.Items[i]
			if b.Status.Phase != "" {
				continue
			}
			b.Status.Phase = phase
			b.Status.Location = "s3://backups/demo/" + b.Name + "/"
			b.Status.Conditions = []metav1.Condition{{Type: v1alpha1.BackupConditionSucceeded, Status: metav1.ConditionFalse,
				Reason: "Failed", Message: message, LastTransitionTime: metav1.NewTime(now)}}
			if err := f.client.Update(ctx, b); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// TestShutdownSurvivesACrashAtEveryWrite: whichever status write is lost, a
// shutdown backs the cluster up first, then powers the worker and then the
// control planes off, each once and without draining, and the backup is
// marked as the operation's.
func TestShutdownSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, started("power-cut", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationShutdown}))
			f.withBackupSettings(v1alpha1.BackupSucceeded, "")
			f.failWrite = fail
			op := f.run("power-cut")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			var names []string
			for _, s := range op.Status.Steps {
				names = append(names, s.Name())
			}
			if want := []string{"cp-1 backup", "worker-1", "cp-1", "cp-2", "cp-3"}; !slices.Equal(names, want) {
				t.Errorf("steps %v, want %v", names, want)
			}
			for _, name := range machineNames {
				if n := f.node(name); f.calls(name, "shutdown force=true") != 1 || n.Stage != "off" {
					t.Errorf("%s: stage %s, calls %v", name, n.Stage, n.Calls)
				}
			}
			var b v1alpha1.TalosBackup
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "power-cut"}, &b); err != nil ||
				b.Annotations[v1alpha1.AnnotationOperation] != "uid-power-cut" || b.Spec.ClusterName != "demo" || b.Spec.ScheduledAt != nil {
				t.Errorf("the shutdown's backup: %+v, %v", b, err)
			}
			if !f.budgetFree() {
				t.Error("the budget is still held")
			}
		})
	}
	// Start, the backup step (begun, then waiting for the runner), one per
	// node, the end.
	if total != 8 {
		t.Fatalf("%d status writes, want 8: the crash points were not all exercised", total)
	}
}

// TestShutdownStopsWhenTheBackupFails: a failed backup fails the shutdown
// before any node goes down; a cluster without backup settings is refused.
func TestShutdownStopsWhenTheBackupFails(t *testing.T) {
	f := newFixture(t, started("power-cut", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationShutdown}))
	f.withBackupSettings(v1alpha1.BackupFailed, "the bucket backups does not exist")
	op := f.run("power-cut")
	if op.Status.Phase != v1alpha1.OperationFailed || op.Status.Steps[0].Phase != v1alpha1.OperationFailed ||
		!strings.Contains(op.Status.Steps[0].Message, "TalosBackup power-cut failed: the bucket backups does not exist; nothing was shut down") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, name := range machineNames {
		if n := f.node(name); len(n.Calls) != 0 || n.Stage != "running" {
			t.Errorf("%s: stage %s, calls %v", name, n.Stage, n.Calls)
		}
	}

	f = newFixture(t, started("power-cut", v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationShutdown}))
	op = f.run("power-cut")
	if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c == nil ||
		c.Reason != v1alpha1.OperationReasonPrecheckFailed || !strings.Contains(c.Message, "TalosCluster demo has no spec.backup") {
		t.Fatalf("a cluster without backup settings: %+v", op.Status)
	}
}
