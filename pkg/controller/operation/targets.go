package operation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// targetsOf are the machines of the operation, in the order their steps
// run: the configured machines spec.machines names, or when it names none
// every configured machine its type targets (ichor.Operations), control
// planes first, then workers, each by name. An error says why the
// operation cannot act on them.
func targetsOf(op *v1alpha1.TalosOperation, machines []*v1alpha1.TalosMachine) ([]*v1alpha1.TalosMachine, error) {
	d, ok := ichor.OperationFor(ichor.OperationType(op.Spec.Type))
	if !ok {
		return nil, fmt.Errorf("%s is not an operation type", op.Spec.Type)
	}
	return chooseTargets(op, machines, d.Targets == ichor.TargetsControlPlanes)
}

func chooseTargets(op *v1alpha1.TalosOperation, machines []*v1alpha1.TalosMachine, onlyControlPlanes bool) ([]*v1alpha1.TalosMachine, error) {
	byName := map[string]*v1alpha1.TalosMachine{}
	for _, m := range machines {
		byName[m.Name] = m
	}
	var chosen []*v1alpha1.TalosMachine
	if len(op.Spec.Machines) == 0 {
		for _, m := range machines {
			if m.Status.AppliedConfig != nil && (!onlyControlPlanes || render.MachineRole(m) == v1alpha1.MachineRoleControlPlane) {
				chosen = append(chosen, m)
			}
		}
		if len(chosen) == 0 {
			return nil, fmt.Errorf("TalosCluster %s has no configured machine to act on", op.Spec.ClusterName)
		}
	}
	for _, name := range op.Spec.Machines {
		m, ok := byName[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("spec.machines: %s is not an approved TalosMachine of TalosCluster %s in namespace %s", name, op.Spec.ClusterName, op.Namespace)
		case m.Status.AppliedConfig == nil:
			return nil, fmt.Errorf("spec.machines: %s is not configured yet", name)
		case onlyControlPlanes && render.MachineRole(m) != v1alpha1.MachineRoleControlPlane:
			return nil, fmt.Errorf("spec.machines: %s is a worker; %s acts on control planes only", name, op.Spec.Type)
		}
		chosen = append(chosen, m)
	}
	sortControlPlanesFirst(chosen)
	return chosen, nil
}

// sortControlPlanesFirst orders machines as steps run: control planes, then
// workers, each by name.
func sortControlPlanesFirst(ms []*v1alpha1.TalosMachine) {
	rank := func(m *v1alpha1.TalosMachine) int {
		if render.MachineRole(m) == v1alpha1.MachineRoleControlPlane {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(ms, func(a, b *v1alpha1.TalosMachine) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Name, b.Name))
	})
}

// byRole names the control planes and the workers among machines, in
// their order.
func byRole(machines []*v1alpha1.TalosMachine) (controlPlanes, workers []string) {
	for _, m := range machines {
		if render.MachineRole(m) == v1alpha1.MachineRoleControlPlane {
			controlPlanes = append(controlPlanes, m.Name)
		} else {
			workers = append(workers, m.Name)
		}
	}
	return controlPlanes, workers
}

// oneStepEach is the steps of a kind without its own: one per target.
func oneStepEach(_ *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	steps := make([]v1alpha1.OperationStep, len(targets))
	for i, m := range targets {
		steps[i] = v1alpha1.OperationStep{Machine: m.Name, Phase: v1alpha1.OperationPending}
	}
	return steps
}
