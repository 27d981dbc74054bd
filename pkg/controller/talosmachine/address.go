package talosmachine

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// addressField indexes TalosMachines by v1alpha1.AddressKey of their address.
const addressField = "ichor.dev/address-key"

// indexAddresses registers addressField with mgr's cache.
func indexAddresses(ctx context.Context, mgr manager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.TalosMachine{}, addressField, addressKeys)
}

func addressKeys(o client.Object) []string {
	m, ok := o.(*v1alpha1.TalosMachine)
	if !ok || m.Spec.Address == "" {
		return nil
	}
	return []string{v1alpha1.AddressKey(m.Spec.Address)}
}

// claimedBy names the machine, in any namespace, that has m's address
// before m: one that holds it (v1alpha1.HoldsAddress), or, among machines
// none of which holds it yet, an older one. Admission refuses a machine at
// a held address, but two created at once both pass it; of those, only the
// oldest is ever contacted, so that no node is pinned twice. Empty: m may
// contact its node.
func (r *Reconciler) claimedBy(ctx context.Context, m *v1alpha1.TalosMachine) (string, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, client.MatchingFields{addressField: v1alpha1.AddressKey(m.Spec.Address)}); err != nil {
		return "", fmt.Errorf("list TalosMachines at %s: %w", m.Spec.Address, err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == m.UID || !o.DeletionTimestamp.IsZero() && !v1alpha1.HoldsAddress(o) {
			continue
		}
		if v1alpha1.HoldsAddress(o) || older(o, m) {
			return o.Namespace + "/" + o.Name, nil
		}
	}
	return "", nil
}

// older orders machines by creation, then by namespace and name.
func older(a, b *v1alpha1.TalosMachine) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}
