// Package machineaddresses keeps one TalosMachine per node address across
// every namespace. A machine that pinned the certificate at an address, or
// was approved, holds that address: a second TalosMachine there, perhaps in
// another tenant's namespace, would be contacted the next time the node
// entered maintenance mode (a reset, a reinstall) and could pin it and send
// it a config of its own cluster. So creating a machine at an address
// another machine holds, or moving one there, is refused, to admins too:
// the holder must be deleted first. The one exception is the machine a
// MachineReclaim brings in for the machine it resets (labelled with the
// reclaim's name; creating that reclaim needed the delete verb on the
// holder). The refusal names the holder only when it is in the
// requester's namespace.
//
// The informer answers, so two machines created at one address within its
// delay both pass here; ichor-controller then contacts neither while the
// other holds the address (pkg/controller/talosmachine).
package machineaddresses

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/tools/cache"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorMachineAddresses"

// addressIndex indexes TalosMachines by v1alpha1.AddressKey of their address.
const addressIndex = "addressKey"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses a second claim on a node's address.
type Plugin struct {
	*admission.Handler
	machines cache.Indexer
	reclaims listers.MachineReclaimLister
	err      error
}

var (
	_ admission.ValidationInterface   = &Plugin{}
	_ initializer.WantsIchorInformers = &Plugin{}
)

// New returns the plugin; it needs informers before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetIchorInformers receives the informers; the machines' one is indexed
// by address.
func (p *Plugin) SetIchorInformers(f externalversions.SharedInformerFactory) {
	informer := f.Ichor().V1alpha1().TalosMachines().Informer()
	p.err = informer.AddIndexers(cache.Indexers{addressIndex: func(obj any) ([]string, error) {
		m, ok := obj.(*v1alpha1.TalosMachine)
		if !ok || m.Spec.Address == "" {
			return nil, nil
		}
		return []string{v1alpha1.AddressKey(m.Spec.Address)}, nil
	}})
	p.machines = informer.GetIndexer()
	p.reclaims = f.Ichor().V1alpha1().MachineReclaims().Lister()
}

// ValidateInitialization refuses to run without the indexed informer.
func (p *Plugin) ValidateInitialization() error {
	if p.err != nil {
		return fmt.Errorf("%s: index TalosMachines by address: %w", PluginName, p.err)
	}
	if p.machines == nil || p.reclaims == nil {
		return errors.New(PluginName + " needs informers")
	}
	return nil
}

// Validate refuses a TalosMachine created at, or moved to, an address
// another machine holds.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("talosmachines") || a.GetSubresource() != "" {
		return nil
	}
	m, ok := a.GetObject().(*ichor.TalosMachine)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosMachine, got %T", PluginName, a.GetObject()))
	}
	key := v1alpha1.AddressKey(m.Spec.Address)
	if old, ok := a.GetOldObject().(*ichor.TalosMachine); ok && v1alpha1.AddressKey(old.Spec.Address) == key {
		return nil
	}
	holders, err := p.machines.ByIndex(addressIndex, key)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
	}
	for _, obj := range holders {
		h, ok := obj.(*v1alpha1.TalosMachine)
		if !ok || h.UID == m.UID && m.UID != "" || !v1alpha1.HoldsAddress(h) || p.reclaimedFrom(m, h) {
			continue
		}
		who := "a TalosMachine in another namespace"
		if h.Namespace == a.GetNamespace() {
			who = fmt.Sprintf("TalosMachine %s", h.Name)
		}
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), field.Forbidden(field.NewPath("spec", "address"),
			fmt.Sprintf("%s holds the node at %s (it pinned its certificate or was approved): one node, one TalosMachine; "+
				"delete that machine first, or give this one its own node's address", who, m.Spec.Address)))
	}
	return nil
}

// reclaimedFrom says whether m is the machine a MachineReclaim of its
// namespace brings in for h, the machine that reclaim resets.
func (p *Plugin) reclaimedFrom(m *ichor.TalosMachine, h *v1alpha1.TalosMachine) bool {
	name := m.Labels[v1alpha1.LabelMachineReclaim]
	if name == "" {
		return false
	}
	rc, err := p.reclaims.MachineReclaims(m.Namespace).Get(name)
	if err != nil || rc.Spec.MachineRef == nil {
		return false
	}
	ref := rc.Spec.MachineRef
	return ref.Namespace == h.Namespace && ref.Name == h.Name && (rc.Status.SourceUID == "" || rc.Status.SourceUID == h.UID)
}
