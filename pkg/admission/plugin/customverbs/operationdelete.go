package customverbs

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validateOperationDelete asks start on talosoperations/<type> for deleting
// an operation someone started that has not ended: deleting it stops it
// after its step in flight, which can leave a ca-rotation with the old CA
// still trusted or an etcd-restore with no etcd, so it is a decision of
// whoever may start that type. A Pending operation nobody started is its
// creator's to take back, and one that Succeeded or Failed is history: the
// controller let go of it (a new operation takes over what a failed one
// left), and the audit log keeps who started it. The object is the stored
// one, as the storage deletes it (each one of a collection delete), so a
// start racing the delete is seen.
func (p *Plugin) validateOperationDelete(ctx context.Context, a admission.Attributes) error {
	if a.GetResource().Resource != "talosoperations" || a.GetSubresource() != "" {
		return nil
	}
	op, ok := a.GetOldObject().(*ichor.TalosOperation)
	if !ok {
		// Fail closed: without the stored object nobody can tell whether it runs.
		return apierrors.NewInternalError(fmt.Errorf("%s: the delete of a TalosOperation came without the stored object, a %T", PluginName, a.GetOldObject()))
	}
	if op.Status.StartedAt == nil || op.Status.Phase == ichor.OperationSucceeded || op.Status.Phase == ichor.OperationFailed {
		return nil
	}
	phase := op.Status.Phase
	if phase == "" {
		phase = ichor.OperationPending
	}
	return p.authorizeHeld(ctx, a, ichor.VerbStart, string(op.Spec.Type),
		fmt.Sprintf("delete TalosOperation %q (%s, started by %s at %s, now %s), which stops it after its step in flight",
			op.Name, op.Spec.Type, op.Status.StartedBy, op.Status.StartedAt.UTC().Format(time.RFC3339), phase),
		"who may start it may stop it; one nobody started, or one that ended, needs only delete")
}
