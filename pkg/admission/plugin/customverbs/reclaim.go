package customverbs

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validateReclaimSource checks that the creator of a MachineReclaim of a
// managed machine may delete that machine where it is: a reclaim resets it
// and takes it away, which is what deleting it does, and its namespace may
// be one the creator has no rights in. (The spec never changes after create.)
func (p *Plugin) validateReclaimSource(ctx context.Context, a admission.Attributes) error {
	r, ok := a.GetObject().(*ichor.MachineReclaim)
	if !ok || a.GetResource().Resource != "machinereclaims" {
		return nil
	}
	if u := r.Spec.Unmanaged; u != nil && r.Spec.MachineRef == nil {
		return p.validateReclaimTalosconfig(ctx, a, u.TalosconfigSecretRef.Name)
	}
	if r.Spec.MachineRef == nil {
		return nil
	}
	ref := r.Spec.MachineRef
	return p.ask(ctx, a, question{
		verb: "delete", group: ichor.GroupName, version: a.GetResource().Version, resource: "talosmachines",
		namespace: ref.Namespace, name: ref.Name,
	}, fmt.Sprintf("reclaim TalosMachine %s/%s: reclaiming resets it, which needs the \"delete\" verb on talosmachines %q in namespace %q",
		ref.Namespace, ref.Name, ref.Name, ref.Namespace))
}

// validateReclaimTalosconfig checks that the creator of a reclaim of an
// unmanaged node may read and delete the talosconfig Secret it hands over:
// ichor-controller uses that credential and then deletes it, so naming a
// Secret one could not would use, and destroy, someone else's.
func (p *Plugin) validateReclaimTalosconfig(ctx context.Context, a admission.Attributes, secret string) error {
	refusal := fmt.Sprintf("hand over Secret %q: the talosconfig it holds is used and then deleted, which needs the \"get\" and \"delete\" verbs on secrets %q in namespace %q",
		secret, secret, a.GetNamespace())
	for _, verb := range []string{"get", "delete"} {
		q := question{verb: verb, version: "v1", resource: "secrets", namespace: a.GetNamespace(), name: secret}
		if err := p.ask(ctx, a, q, refusal); err != nil {
			return err
		}
	}
	return nil
}
