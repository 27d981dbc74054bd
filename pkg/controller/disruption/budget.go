// Package disruption is a cluster's disruption budget: the record, in the
// TalosCluster's status, of the one machine that may be away. Every action
// that takes a node or an etcd member away (a reboot, a control plane's API
// server restart, a reset) takes it first and gives it back when the node is
// back or the action failed. The budget lives in the API, not in a process,
// so it survives a controller restart and a leader change, and two
// controllers (or two reconcilers of one) never both hold it: taking it is
// a status update conditional on the resourceVersion just read.
package disruption

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

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

// Acquire takes m's cluster's budget for action, or keeps it if m holds it
// already. It returns nil when m holds the budget, and the holder when
// another machine does. A holder whose machine is gone (another UID, or no
// machine of that name) no longer holds it.
func (b *Budget) Acquire(ctx context.Context, m *v1alpha1.TalosMachine, action v1alpha1.DisruptionAction) (*v1alpha1.DisruptionStatus, error) {
	for range maxAttempts {
		var c v1alpha1.TalosCluster
		if err := b.Reader.Get(ctx, clusterKey(m), &c); err != nil {
			return nil, fmt.Errorf("read TalosCluster %s for its disruption budget: %w", m.Spec.ClusterName, err)
		}
		cur := c.Status.Disruption
		if cur != nil && cur.MachineUID != m.UID {
			gone, err := b.holderGone(ctx, c.Namespace, cur)
			if err != nil {
				return nil, err
			}
			if !gone {
				return cur.DeepCopy(), nil
			}
		}
		if cur != nil && cur.MachineUID == m.UID && cur.Action == action {
			return nil, nil
		}
		c.Status.Disruption = &v1alpha1.DisruptionStatus{
			Machine: m.Name, MachineUID: m.UID, Action: action, Since: metav1.NewTime(b.now()),
		}
		err := b.Client.Status().Update(ctx, &c)
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

// Release gives m's cluster's budget back if m holds it.
func (b *Budget) Release(ctx context.Context, m *v1alpha1.TalosMachine) error {
	for range maxAttempts {
		var c v1alpha1.TalosCluster
		err := b.Reader.Get(ctx, clusterKey(m), &c)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read TalosCluster %s for its disruption budget: %w", m.Spec.ClusterName, err)
		}
		if !HeldBy(&c, m) {
			return nil
		}
		c.Status.Disruption = nil
		err = b.Client.Status().Update(ctx, &c)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("give back the disruption budget of TalosCluster %s: %w", m.Spec.ClusterName, err)
		}
		return nil
	}
	return fmt.Errorf("give back the disruption budget of TalosCluster %s: it kept changing", m.Spec.ClusterName)
}

// HeldBy reports whether m holds c's budget, as far as this copy of c says.
func HeldBy(c *v1alpha1.TalosCluster, m *v1alpha1.TalosMachine) bool {
	d := c.Status.Disruption
	return d != nil && d.MachineUID == m.UID
}

// Describe is a holder as people read it in a condition.
func Describe(d *v1alpha1.DisruptionStatus) string {
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
	return holder.UID != d.MachineUID, nil
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
