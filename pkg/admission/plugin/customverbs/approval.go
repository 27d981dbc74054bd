package customverbs

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validatePrivilegedApproval asks approve on talosmachines/privileged-approval
// for an approval of a control plane, or of any machine of a cluster already
// bootstrapped (or that cannot be read: the check fails closed). The machine
// is the stored one the update changes; rejections hand out nothing.
func (p *Plugin) validatePrivilegedApproval(ctx context.Context, a admission.Attributes) error {
	m, okNew := a.GetObject().(*ichor.TalosMachine)
	old, okOld := a.GetOldObject().(*ichor.TalosMachine)
	if !okNew || !okOld || m.Status.Approval == nil || m.Status.Approval.Decision != ichor.ApprovalApproved {
		return nil
	}
	if prev := old.Status.Approval; prev != nil && prev.Decision == ichor.ApprovalApproved {
		return nil // repeating a decision changes nothing
	}
	why := ""
	switch {
	case old.Spec.Role == ichor.MachineRoleControlPlane:
		why = "a control plane receives every CA key of its cluster"
	case old.Spec.ClusterName == "":
		return nil // validation refuses an approval without a cluster
	default:
		c, err := p.client.IchorV1alpha1().TalosClusters(a.GetNamespace()).Get(ctx, old.Spec.ClusterName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			why = "TalosCluster " + old.Spec.ClusterName + " does not exist, so Ichor cannot tell it is not running"
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("%s: read TalosCluster %s: %w", PluginName, old.Spec.ClusterName, err))
		case c.Status.BootstrappedAt != nil:
			why = "TalosCluster " + c.Name + " is bootstrapped, so the machine joins a running cluster with its bootstrap token"
		default:
			return nil
		}
	}
	return p.authorize(ctx, a, ichor.VerbApprove, ichor.PrivilegedApprovalSubresource,
		fmt.Sprintf("approve TalosMachine %q (%s)", a.GetName(), why))
}
