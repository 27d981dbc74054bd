package machineconfig

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

func TestDisruptionOf(t *testing.T) {
	cp, worker := v1alpha1.MachineRoleControlPlane, v1alpha1.MachineRoleWorker
	for _, c := range []struct {
		effect v1alpha1.ConfigEffect
		role   v1alpha1.MachineRole
		want   v1alpha1.DisruptionAction
	}{
		{v1alpha1.ConfigEffectNone, cp, ""},
		{v1alpha1.ConfigEffectNoReboot, cp, ""},
		{v1alpha1.ConfigEffectNoReboot, worker, ""},
		{v1alpha1.ConfigEffectReboot, worker, v1alpha1.DisruptionReboot},
		{v1alpha1.ConfigEffectReboot, cp, v1alpha1.DisruptionReboot},
		{v1alpha1.ConfigEffectAPIServerRestart, cp, v1alpha1.DisruptionAPIServerRestart},
		{v1alpha1.ConfigEffectAPIServerRestart, worker, ""},
	} {
		got, disrupts := disruptionOf(c.effect, c.role)
		if got != c.want || disrupts != (c.want != "") {
			t.Errorf("disruptionOf(%s, %s) = %q, %t; want %q", c.effect, c.role, got, disrupts, c.want)
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
