package machineconfig

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

func TestSerialized(t *testing.T) {
	cp, worker := v1alpha1.MachineRoleControlPlane, v1alpha1.MachineRoleWorker
	for _, c := range []struct {
		effect v1alpha1.ConfigEffect
		role   v1alpha1.MachineRole
		want   bool
	}{
		{v1alpha1.ConfigEffectNone, cp, false},
		{v1alpha1.ConfigEffectNoReboot, cp, false},
		{v1alpha1.ConfigEffectNoReboot, worker, false},
		{v1alpha1.ConfigEffectReboot, worker, true},
		{v1alpha1.ConfigEffectReboot, cp, true},
		{v1alpha1.ConfigEffectAPIServerRestart, cp, true},
		{v1alpha1.ConfigEffectAPIServerRestart, worker, false},
	} {
		if got := serialized(c.effect, c.role); got != c.want {
			t.Errorf("serialized(%s, %s) = %t, want %t", c.effect, c.role, got, c.want)
		}
	}
}

func TestBusyMachines(t *testing.T) {
	machine := func(name, cluster string, phase v1alpha1.MachinePhase, decision v1alpha1.ApprovalDecision) v1alpha1.TalosMachine {
		m := v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.TalosMachineSpec{ClusterName: cluster}}
		m.Status.Phase = phase
		if decision != "" {
			m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: decision}
		}
		return m
	}
	deleting := machine("going", "demo", v1alpha1.MachinePhaseResetting, v1alpha1.ApprovalApproved)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	all := []v1alpha1.TalosMachine{
		machine("self", "demo", v1alpha1.MachinePhaseReady, v1alpha1.ApprovalApproved),
		machine("ready", "demo", v1alpha1.MachinePhaseReady, v1alpha1.ApprovalApproved),
		machine("rebooting", "demo", v1alpha1.MachinePhaseConfiguring, v1alpha1.ApprovalApproved),
		machine("down", "demo", v1alpha1.MachinePhaseUnreachable, v1alpha1.ApprovalApproved),
		machine("unapproved", "demo", v1alpha1.MachinePhasePendingApproval, ""),
		machine("rejected", "demo", v1alpha1.MachinePhaseRejected, v1alpha1.ApprovalRejected),
		machine("elsewhere", "other", v1alpha1.MachinePhaseConfiguring, v1alpha1.ApprovalApproved),
		deleting,
	}
	got := busyMachines(&all[0], all)
	if want := []string{"down (Unreachable)", "rebooting (Configuring)"}; strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("busyMachines = %v, want %v", got, want)
	}
	if got := busyMachines(&all[2], all[:3]); len(got) != 0 {
		t.Errorf("a machine waits for itself: %v", got)
	}
}

func TestDescribe(t *testing.T) {
	if got := describe(v1alpha1.ConfigEffectNoReboot, nil); got != "NoReboot" {
		t.Errorf("describe without changes = %q", got)
	}
	changes := make([]render.Change, 7)
	for i := range changes {
		changes[i] = render.Change{Path: "machine.f" + string(rune('a'+i))}
	}
	got := describe(v1alpha1.ConfigEffectReboot, changes)
	if want := "Reboot: machine.fa, machine.fb, machine.fc, machine.fd, machine.fe, and 2 more"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
}

func TestClusterLocksSerializePerCluster(t *testing.T) {
	var l clusterLocks
	unlockA := l.lock("ns/a")
	// Another cluster is not held up.
	l.lock("ns/b")()
	done := make(chan struct{})
	go func() {
		l.lock("ns/a")()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a second decision for the same cluster did not wait")
	default:
	}
	unlockA()
	<-done
}
