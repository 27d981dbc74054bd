package render

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Scope is the group a patch is ordered in. Broader scopes apply first so
// that narrower ones can override them.
type Scope int

const (
	// ScopeCluster is a patch with an empty target: every machine of the cluster.
	ScopeCluster Scope = iota
	// ScopeRole is a patch targeting the control planes or the workers.
	ScopeRole
	// ScopeMachine is a patch targeting machines by name or by label selector.
	ScopeMachine
)

// String names the scope for logs and tests.
func (s Scope) String() string {
	switch s {
	case ScopeCluster:
		return "cluster"
	case ScopeRole:
		return "role"
	case ScopeMachine:
		return "machine"
	default:
		return fmt.Sprintf("Scope(%d)", int(s))
	}
}

// scopedPatch is a patch chosen for a machine, with the group it sorts in.
type scopedPatch struct {
	patch *ichorv1alpha1.TalosConfigPatch
	scope Scope
}

// MachineRole is the role a machine plays: its spec.role, or worker when unset,
// as the API defaults it.
func MachineRole(m *ichorv1alpha1.TalosMachine) ichorv1alpha1.MachineRole {
	if m.Spec.Role == "" {
		return ichorv1alpha1.MachineRoleWorker
	}
	return m.Spec.Role
}

// InstallDisk is the disk Talos is installed on in m's node: its
// spec.install.disk, or else the smallest disk the node reported that is not
// on USB, where boot media usually are (the first by path among equals);
// empty when neither says.
func InstallDisk(m *ichorv1alpha1.TalosMachine) string {
	if m.Spec.Install.Disk != "" || m.Status.Hardware == nil {
		return m.Spec.Install.Disk
	}
	var best *ichorv1alpha1.Disk
	for i := range m.Status.Hardware.Disks {
		d := &m.Status.Hardware.Disks[i]
		if d.Path == "" || d.SizeBytes <= 0 || d.Transport == "usb" {
			continue
		}
		if best == nil || d.SizeBytes < best.SizeBytes || (d.SizeBytes == best.SizeBytes && d.Path < best.Path) {
			best = d
		}
	}
	if best == nil {
		return ""
	}
	return best.Path
}

// selectPatches returns the enabled patches of the machine's cluster that
// target the machine, in application order: scope, then priority, then name.
// A patch whose target cannot be evaluated is an error, since skipping it
// would render a config its author did not ask for.
func selectPatches(cluster *ichorv1alpha1.TalosCluster, machine *ichorv1alpha1.TalosMachine, patches []ichorv1alpha1.TalosConfigPatch) ([]scopedPatch, error) {
	var selected []scopedPatch
	for i := range patches {
		p := &patches[i]
		if p.Namespace != cluster.Namespace || p.Spec.ClusterName != cluster.Name || p.Spec.Disabled {
			continue
		}
		scope, ok, err := targets(p.Spec.Target, machine)
		if err != nil {
			return nil, &PatchError{Patch: nameOf(p), Reason: PatchInvalidTarget, Err: err}
		}
		if ok {
			selected = append(selected, scopedPatch{patch: p, scope: scope})
		}
	}
	slices.SortFunc(selected, func(a, b scopedPatch) int { return CompareApplicationOrder(a.patch, b.patch) })
	return selected, nil
}

// ScopeOf is the group a patch with target t is ordered in.
func ScopeOf(t ichorv1alpha1.PatchTarget) Scope {
	switch {
	case t.Role != "":
		return ScopeRole
	case len(t.Machines) > 0 || t.Selector != nil:
		return ScopeMachine
	}
	return ScopeCluster
}

// CompareApplicationOrder orders two patches of a cluster as they apply to
// a machine: scope, then priority, then name.
func CompareApplicationOrder(a, b *ichorv1alpha1.TalosConfigPatch) int {
	return cmp.Or(
		cmp.Compare(ScopeOf(a.Spec.Target), ScopeOf(b.Spec.Target)),
		cmp.Compare(a.Spec.Priority, b.Spec.Priority),
		cmp.Compare(a.Name, b.Name),
	)
}

// targets reports whether a target selects the machine, and in which scope.
func targets(t ichorv1alpha1.PatchTarget, machine *ichorv1alpha1.TalosMachine) (Scope, bool, error) {
	set := 0
	for _, isSet := range []bool{t.Role != "", len(t.Machines) > 0, t.Selector != nil} {
		if isSet {
			set++
		}
	}
	switch {
	case set > 1:
		return 0, false, errors.New("target sets more than one of role, machines and selector")
	case t.Role != "":
		return ScopeRole, t.Role == MachineRole(machine), nil
	case len(t.Machines) > 0:
		return ScopeMachine, slices.Contains(t.Machines, machine.Name), nil
	case t.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(t.Selector)
		if err != nil {
			return 0, false, fmt.Errorf("target selector: %w", err)
		}
		return ScopeMachine, sel.Matches(labels.Set(machine.Labels)), nil
	default:
		return ScopeCluster, true, nil
	}
}

// nameOf is the namespace/name a patch is reported under.
func nameOf(p *ichorv1alpha1.TalosConfigPatch) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// Targets reports whether patch applies to machine: it is enabled, of the
// machine's cluster, and its target selects the machine. An error means the
// target cannot be evaluated.
func Targets(patch *ichorv1alpha1.TalosConfigPatch, machine *ichorv1alpha1.TalosMachine) (bool, error) {
	if patch.Spec.Disabled || patch.Spec.ClusterName != machine.Spec.ClusterName {
		return false, nil
	}
	_, ok, err := targets(patch.Spec.Target, machine)
	return ok, err
}
