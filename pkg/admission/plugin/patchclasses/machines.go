package patchclasses

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/render"
)

// validateMachine asks the privileged verb of a write of a TalosMachine that
// changes which privileged patches select it: an admin who targets a
// privileged patch at some machines by name or label chose those machines,
// and a label written by an operator would otherwise pull that patch (its
// static pods, host mounts, credentials) onto another machine, or take a
// hardening patch off one. Labels that move no privileged patch stay the
// operator's.
//
// Creating a machine, or assigning an unassigned one to a cluster, counts
// against a machine with no name and no labels: the patches every machine of
// its cluster and role receives come with any machine, but one selected by
// its name or labels is a choice the admin made for other machines, and the
// config it carries would reach a node at an address the operator chose.
//
// A disabled patch counts: enabling it later is a decision about its
// selector, made without seeing the machines relabelled meanwhile.
func (p *Plugin) validateMachine(ctx context.Context, a admission.Attributes) error {
	m, ok := a.GetObject().(*ichor.TalosMachine)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosMachine, got %T", PluginName, a.GetObject()))
	}
	if m.Spec.ClusterName == "" {
		return nil // no patch selects a machine of no cluster
	}
	after := selectable(m.Name, m.Spec, m.Labels)
	before := selectable("", m.Spec, nil)
	what, by := "create", "name or labels"
	if old, isUpdate := a.GetOldObject().(*ichor.TalosMachine); isUpdate {
		what, by = "update", "labels or cluster"
		if old.Spec.ClusterName == m.Spec.ClusterName && old.Spec.Role == m.Spec.Role {
			if maps.Equal(old.Labels, m.Labels) {
				return nil
			}
			what, by, before = "relabel", "labels", selectable(old.Name, old.Spec, old.Labels)
		}
	}

	patches, err := p.client.IchorV1alpha1().TalosConfigPatches(a.GetNamespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: list TalosConfigPatches to check which select TalosMachine %s: %w", PluginName, a.GetName(), err))
	}
	var moved []string
	var reason string
	var authzErr error
	for i := range patches.Items {
		patch := patches.Items[i].DeepCopy()
		patch.Spec.Disabled = false
		now, errNow := render.Targets(patch, after)
		then, errThen := render.Targets(patch, before)
		change := ""
		switch {
		case errNow != nil || errThen != nil:
			change = "its target cannot be evaluated"
		case now == then:
			continue
		case now:
			change = "would start selecting it"
		default:
			change = "would stop selecting it"
		}
		if !privileged(patch.Spec.Patch) {
			continue
		}
		decision, why, err := p.authorizePrivileged(ctx, a, patch.Name)
		if decision == authorizer.DecisionAllow {
			continue
		}
		if len(moved) == 0 {
			reason, authzErr = why, err
		}
		moved = append(moved, fmt.Sprintf("%s %s", patch.Name, change))
	}
	if len(moved) == 0 {
		return nil
	}
	slices.Sort(moved)
	msg := fmt.Sprintf("user %q cannot %s TalosMachine %s: its %s change which privileged TalosConfigPatches select it (%s); that needs the %q verb on talosconfigpatches/%s (admins hold it); labels no privileged patch selects on need no more than update",
		a.GetUserInfo().GetName(), what, a.GetName(), by, strings.Join(moved, "; "), ichor.VerbUpdate, ichor.PrivilegedPatchSubresource)
	return admission.NewForbidden(a, errors.New(authz.Denied(msg, reason, authzErr)))
}

// selectable is what a patch's target reads of a machine.
func selectable(name string, spec ichor.TalosMachineSpec, labels map[string]string) *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: spec.ClusterName, Role: v1alpha1.MachineRole(spec.Role)},
	}
}

// privileged reports whether a stored patch writes a field above the plain
// settings; one that no longer reads counts, so the check fails closed.
func privileged(patch string) bool {
	fields, err := render.ClassifyPatch(patch)
	return err != nil || render.StrongestClass(fields) != render.ClassSettings
}
