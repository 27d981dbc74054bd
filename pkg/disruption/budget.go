// Package disruption is a cluster's disruption budget: the record, in the
// TalosCluster's status, of the one machine that may be away (or the batch
// of workers an operation takes away together, up to its maxUnavailable). Every action
// that takes a node or an etcd member away (a reboot, a control plane's API
// server restart, a reset) takes it first and gives it back when the node is
// back or the action failed. The budget lives in the API, not in a process,
// so it survives a controller restart and a leader change, and two
// controllers (or two reconcilers of one) never both hold it: taking it is
// a server-side apply conditional on the resourceVersion just read, and
// giving it back a patch that first tests who holds it.
package disruption

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
)

// FieldManager owns status.disruption while a machine holds the budget.
const FieldManager = v1alpha1.FieldManagerDisruption

// Budget takes and gives back clusters' disruption budgets.
type Budget struct {
	// Client writes TalosCluster status.
	Client client.Client
	// Reader reads clusters and machines without a cache: a decision on a
	// stale copy would be refused by the resourceVersion anyway.
	Reader client.Reader
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// maxAttempts bounds the retries on a conflict with another status writer.
const maxAttempts = 5

// Acquire takes m's cluster's budget for action, for m's own config rollout
// or deletion, or keeps it if m holds it for that already. It returns nil
// when m holds the budget, and the holder when another machine does, or an
// operation's step holds it for m. A holder whose machine or operation is
// gone (another UID, or none of that name) no longer holds it.
func (b *Budget) Acquire(ctx context.Context, m *v1alpha1.TalosMachine, action v1alpha1.DisruptionAction) (*v1alpha1.DisruptionStatus, error) {
	return b.acquire(ctx, m, action, "", 1, nil)
}

// AcquireForOperation is Acquire for a step of the TalosOperation named
// operation (in m's namespace), which takes m away as action. With batch
// above 1, m may join the machines the operation already holds the budget
// for, with the same action, while they are fewer than batch: the
// operation says which machines may go together (workers).
//
// leaving are machines whose steps of the operation just ended: their
// places are given back in the same write that takes m's, so a rollout
// hands the budget from one node to the next in one write instead of two.
// When it returns no holder and no error, none of them holds a place any
// more; otherwise they keep theirs.
func (b *Budget) AcquireForOperation(ctx context.Context, operation string, m *v1alpha1.TalosMachine, action v1alpha1.DisruptionAction, batch int, leaving ...*v1alpha1.TalosMachine) (*v1alpha1.DisruptionStatus, error) {
	return b.acquire(ctx, m, action, operation, batch, leaving)
}

func (b *Budget) acquire(ctx context.Context, m *v1alpha1.TalosMachine, action v1alpha1.DisruptionAction, operation string, batch int, leaving []*v1alpha1.TalosMachine) (*v1alpha1.DisruptionStatus, error) {
	for range maxAttempts {
		var c v1alpha1.TalosCluster
		if err := b.Reader.Get(ctx, clusterKey(m), &c); err != nil {
			return nil, fmt.Errorf("read TalosCluster %s for its disruption budget: %w", m.Spec.ClusterName, err)
		}
		cur := c.Status.Disruption
		handover := false
		if cur != nil && operation != "" && cur.Operation == operation && len(leaving) > 0 {
			cur, handover = without(cur, leaving)
		}
		held := cur != nil && cur.Operation == operation && holds(cur, m)
		if held && !handover && (cur.Action == action || cur.MachineUID != m.UID) {
			return nil, nil
		}
		join := cur != nil && !held && operation != "" && cur.Operation == operation && cur.Action == action && 1+len(cur.Batch) < batch
		if cur != nil && !held && !join {
			gone, err := b.holderGone(ctx, c.Namespace, cur)
			if err != nil {
				return nil, err
			}
			if !gone {
				return cur.DeepCopy(), nil
			}
		}
		d := ichorac.DisruptionStatus().WithMachine(m.Name).WithMachineUID(m.UID).WithAction(action).WithSince(metav1.NewTime(b.now()))
		if held {
			// Its holder's action may change; its batch stays.
			next := cur.DeepCopy()
			if next.MachineUID == m.UID {
				next.Action = action
			}
			d = record(next, cur.Batch)
		} else if join {
			d = record(cur, append(slices.Clone(cur.Batch), v1alpha1.DisruptionMember{Machine: m.Name, MachineUID: m.UID}))
		} else if operation != "" {
			d = d.WithOperation(operation)
		}
		err := b.apply(ctx, &c, d)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("take the disruption budget of TalosCluster %s: %w", m.Spec.ClusterName, err)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("take the disruption budget of TalosCluster %s: it kept changing", m.Spec.ClusterName)
}

// without is d less the places of leaving (nil when no place is left), and
// whether any was removed. When its first machine leaves, the next of its
// batch takes the first place.
func without(d *v1alpha1.DisruptionStatus, leaving []*v1alpha1.TalosMachine) (*v1alpha1.DisruptionStatus, bool) {
	gone := func(uid types.UID) bool {
		return slices.ContainsFunc(leaving, func(m *v1alpha1.TalosMachine) bool { return m.UID == uid })
	}
	rest := slices.DeleteFunc(slices.Clone(d.Batch), func(b v1alpha1.DisruptionMember) bool { return gone(b.MachineUID) })
	if !gone(d.MachineUID) {
		if len(rest) == len(d.Batch) {
			return d, false
		}
		next := d.DeepCopy()
		next.Batch = rest
		return next, true
	}
	if len(rest) == 0 {
		return nil, true
	}
	next := d.DeepCopy()
	next.Machine, next.MachineUID, next.Batch = rest[0].Machine, rest[0].MachineUID, rest[1:]
	return next, true
}

// apply writes d as c's budget, on the version of c just read: if anyone
// changed the cluster since, the write is refused (a conflict) and the
// budget must be read again.
func (b *Budget) apply(ctx context.Context, c *v1alpha1.TalosCluster, d *ichorac.DisruptionStatusApplyConfiguration) error {
	obj := ichorac.TalosCluster(c.Name, c.Namespace).WithResourceVersion(c.ResourceVersion).
		WithStatus(ichorac.TalosClusterStatus().WithDisruption(d))
	return b.Client.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership)
}

// record is cur with batch as its batch, to apply.
func record(cur *v1alpha1.DisruptionStatus, batch []v1alpha1.DisruptionMember) *ichorac.DisruptionStatusApplyConfiguration {
	d := ichorac.DisruptionStatus().WithMachine(cur.Machine).WithMachineUID(cur.MachineUID).WithAction(cur.Action).
		WithSince(cur.Since).WithOperation(cur.Operation)
	for _, b := range batch {
		d = d.WithBatch(ichorac.DisruptionMember().WithMachine(b.Machine).WithMachineUID(b.MachineUID))
	}
	return d
}

// holds reports whether d takes m away: its machine, or one of its batch.
func holds(d *v1alpha1.DisruptionStatus, m *v1alpha1.TalosMachine) bool {
	return d.MachineUID == m.UID || slices.ContainsFunc(d.Batch, func(b v1alpha1.DisruptionMember) bool { return b.MachineUID == m.UID })
}

// Release gives m's cluster's budget back if m holds it for its own config
// rollout or deletion. The removal tests, in the same patch, that the record
// is the one just read, so it never frees a budget that another machine or
// an operation took meanwhile.
func (b *Budget) Release(ctx context.Context, m *v1alpha1.TalosMachine) error {
	return b.release(ctx, m, "")
}

// ReleaseForOperation gives m's place in the budget back if the
// TalosOperation named operation holds one for m: the budget is free once
// no machine of the operation's batch is away.
func (b *Budget) ReleaseForOperation(ctx context.Context, operation string, m *v1alpha1.TalosMachine) error {
	return b.release(ctx, m, operation)
}

func (b *Budget) release(ctx context.Context, m *v1alpha1.TalosMachine, operation string) error {
	for range maxAttempts {
		var c v1alpha1.TalosCluster
		err := b.Reader.Get(ctx, clusterKey(m), &c)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read TalosCluster %s for its disruption budget: %w", m.Spec.ClusterName, err)
		}
		d := c.Status.Disruption
		if d == nil || d.Operation != operation || !holds(d, m) {
			return nil
		}
		next, _ := without(d, []*v1alpha1.TalosMachine{m})
		if next == nil {
			// Removed only if the record is still the one just read: a
			// holder that changed meanwhile keeps the budget.
			if _, err := statusapply.RemoveIfUnchanged(ctx, b.Client, &c, "/status/disruption", d); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("give back the disruption budget of TalosCluster %s: %w", m.Spec.ClusterName, err)
			}
			return nil
		}
		// One of a batch leaves: the others keep the budget.
		err = b.apply(ctx, &c, record(next, next.Batch))
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("give back %s's place in the disruption budget of TalosCluster %s: %w", m.Name, m.Spec.ClusterName, err)
		}
		return nil
	}
	return fmt.Errorf("give back the disruption budget of TalosCluster %s: it kept changing", m.Spec.ClusterName)
}

// ReleaseOperation gives back every place the TalosOperation named
// operation holds in cluster's budget: the operation ended or stopped, and
// whatever it still holds (a worker that took its place and was draining
// when another step failed) is free again.
func (b *Budget) ReleaseOperation(ctx context.Context, cluster client.ObjectKey, operation string) error {
	var c v1alpha1.TalosCluster
	err := b.Reader.Get(ctx, cluster, &c)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read TalosCluster %s for its disruption budget: %w", cluster.Name, err)
	}
	d := c.Status.Disruption
	if d == nil || d.Operation != operation {
		return nil
	}
	if _, err := statusapply.RemoveIfUnchanged(ctx, b.Client, &c, "/status/disruption", d); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("give back the disruption budget of TalosCluster %s: %w", cluster.Name, err)
	}
	return nil
}

// HeldBy reports whether m holds c's budget for its own config rollout or
// deletion, as far as this copy of c says.
func HeldBy(c *v1alpha1.TalosCluster, m *v1alpha1.TalosMachine) bool {
	return HeldForOperation(c, "", m)
}

// HeldForOperation reports whether the TalosOperation named operation holds
// c's budget for m, as far as this copy of c says.
func HeldForOperation(c *v1alpha1.TalosCluster, operation string, m *v1alpha1.TalosMachine) bool {
	d := c.Status.Disruption
	return d != nil && d.Operation == operation && holds(d, m)
}

// Describe is a holder as people read it in a condition.
func Describe(d *v1alpha1.DisruptionStatus) string {
	if d.Operation != "" {
		machines := d.Machine
		for _, b := range d.Batch {
			machines += ", " + b.Machine
		}
		return fmt.Sprintf("%s (%s for operation %s since %s)", machines, d.Action, d.Operation, d.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s (%s since %s)", d.Machine, d.Action, d.Since.UTC().Format(time.RFC3339))
}

func (b *Budget) holderGone(ctx context.Context, ns string, d *v1alpha1.DisruptionStatus) (bool, error) {
	var holder v1alpha1.TalosMachine
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Machine}, &holder)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read TalosMachine %s, which holds the disruption budget: %w", d.Machine, err)
	}
	if holder.UID != d.MachineUID {
		return true, nil
	}
	if d.Operation == "" {
		return false, nil
	}
	var op v1alpha1.TalosOperation
	err = b.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Operation}, &op)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read TalosOperation %s, which holds the disruption budget: %w", d.Operation, err)
	}
	return false, nil
}

func (b *Budget) now() time.Time {
	if b.Now == nil {
		return time.Now()
	}
	return b.Now()
}

func clusterKey(m *v1alpha1.TalosMachine) client.ObjectKey {
	return client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}
}
