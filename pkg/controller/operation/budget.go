package operation

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// mayTake takes the node away for action (takeNode), or waits saying why not.
func (s *step) mayTake(ctx context.Context, action v1alpha1.DisruptionAction) (bool, ctrl.Result, error) {
	reason, msg, err := s.takeNode(ctx, action)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if msg != "" {
		res, err := s.waitFor(reason, "%s", msg)
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

// takeNode checks that the step may take the node away, then takes the
// cluster's disruption budget for it. It returns the reason and message of
// a wait, or "".
func (s *step) takeNode(ctx context.Context, action v1alpha1.DisruptionAction) (string, string, error) {
	if msg := s.othersNotReady(true); msg != "" {
		return v1alpha1.OperationReasonClusterNotHealthy, msg, nil
	}
	if render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane {
		if msg, err := s.etcdQuorumWithout(ctx); msg != "" || err != nil {
			return v1alpha1.OperationReasonClusterNotHealthy, msg, err
		}
	}
	return s.acquire(ctx, action, s.batch())
}

// acquire takes the cluster's disruption budget for the step's node, in a
// batch of batch machines; it returns the reason and message of a wait
// while another holds it, or "".
func (s *step) acquire(ctx context.Context, action v1alpha1.DisruptionAction, batch int) (string, string, error) {
	holder, err := s.r.budget.AcquireForOperation(ctx, s.x.op.Name, s.m, action, batch, s.x.ended...)
	if err != nil {
		return "", "", err
	}
	if holder != nil {
		return v1alpha1.OperationReasonWaitingForBudget, "waiting for the disruption budget, held by " + describeHolder(holder), nil
	}
	s.x.ended = nil // their places went with this write
	return "", "", nil
}

// batch is how many machines the step's may be away with: a worker goes
// with up to spec.maxUnavailable workers, a control plane alone.
func (s *step) batch() int {
	if render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane {
		return 1
	}
	return maxUnavailable(s.x.op)
}

// maxUnavailable is op's spec.maxUnavailable, 1 when unset.
func maxUnavailable(op *v1alpha1.TalosOperation) int {
	if op.Spec.MaxUnavailable == nil {
		return 1
	}
	return int(*op.Spec.MaxUnavailable)
}

// othersNotReady names the machines of the cluster, other than this step's,
// that are not Ready: with countStepped, a machine this operation took
// through its step, or is taking away in the same batch, counts as Ready
// (its step checks the node itself). An operation started past the
// ClusterHealth check does not wait for them.
func (s *step) othersNotReady(countStepped bool) string {
	if meta.IsStatusConditionTrue(s.x.op.Status.Conditions, v1alpha1.OperationConditionHealthOverridden) {
		return ""
	}
	done := map[string]bool{}
	for _, rec := range s.x.op.Status.Steps {
		done[rec.Machine] = countStepped && (rec.Phase == v1alpha1.OperationSucceeded || rec.Phase == v1alpha1.OperationRunning)
	}
	var names []string
	for _, m := range s.machines {
		if m.UID == s.m.UID || m.Status.Phase == v1alpha1.MachinePhaseReady || done[m.Name] {
			continue
		}
		names = append(names, fmt.Sprintf("%s (%s)", m.Name, phaseOf(m)))
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("waiting for every other machine to be Ready: %v", names)
}

func phaseOf(m *v1alpha1.TalosMachine) string {
	if m.Status.Phase == "" {
		return "new"
	}
	return string(m.Status.Phase)
}

func describeHolder(d *v1alpha1.DisruptionStatus) string {
	if d.Operation != "" {
		return fmt.Sprintf("%s for operation %s since %s", d.Machine, d.Operation, d.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s (%s) since %s", d.Machine, d.Action, d.Since.UTC().Format(time.RFC3339))
}
