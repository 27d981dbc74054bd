package intake

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
)

// FieldManager owns the status fields intake writes.
const FieldManager = v1alpha1.FieldManagerIntake

// ownedConditions are the condition types intake writes: its row of the
// table of status writers.
var ownedConditions = v1alpha1.OwnedConditions(&v1alpha1.TalosMachine{}, FieldManager)

// WriteStatus applies the fields of m's status intake owns — phase, observed
// generation, the pinned certificate, hardware, Talos version and its
// conditions — with server-side apply under FieldManager, conditional on
// m's resourceVersion: intake decides on what it read, and a machine that
// changed meanwhile (configured, say) is looked at again, not written over.
func WriteStatus(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine) error {
	s := &m.Status
	st := ichorac.TalosMachineStatus().WithObservedGeneration(s.ObservedGeneration)
	if s.Phase != "" {
		st.WithPhase(s.Phase)
	}
	if s.TalosVersion != "" {
		st.WithTalosVersion(s.TalosVersion)
	}
	if p := s.Maintenance; p != nil {
		st.WithMaintenance(ichorac.MaintenanceStatus().WithCertificateFingerprint(p.CertificateFingerprint).WithSeenAt(p.SeenAt))
	}
	if h := s.Hardware; h != nil {
		hw := ichorac.HardwareStatus().WithAddresses(h.Addresses...)
		if h.UUID != "" {
			hw.WithUUID(h.UUID)
		}
		if h.Serial != "" {
			hw.WithSerial(h.Serial)
		}
		for _, d := range h.Disks {
			disk := ichorac.Disk().WithPath(d.Path).WithSizeBytes(d.SizeBytes)
			if d.Model != "" {
				disk.WithModel(d.Model)
			}
			if d.Serial != "" {
				disk.WithSerial(d.Serial)
			}
			if d.Transport != "" {
				disk.WithTransport(d.Transport)
			}
			hw.WithDisks(disk)
		}
		st.WithHardware(hw)
	}
	st.WithConditions(statusapply.Conditions(s.Conditions, ownedConditions...)...)
	obj := ichorac.TalosMachine(m.Name, m.Namespace).WithResourceVersion(m.ResourceVersion).WithStatus(st)
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	// The next write conditional on m's version is on the one just written.
	if obj.ResourceVersion != nil {
		m.ResourceVersion = *obj.ResourceVersion
	}
	return nil
}
