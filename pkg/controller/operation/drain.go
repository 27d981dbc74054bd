package operation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/workload"
)

// waitError is a step's preparation that is not done yet: the step waits,
// holding what it took, and prepares again.
type waitError struct{ reason, msg string }

func (e *waitError) Error() string { return e.msg }

// owner is what an operation's cordon is recorded under on a Node.
func owner(op *v1alpha1.TalosOperation) string {
	return "TalosOperation/" + op.Namespace + "/" + op.Name
}

// kube is the managed cluster's API as ichor-controller's own identity there.
func (s *step) kube() (kubernetes.Interface, error) {
	if s.r.Workload != nil {
		return s.r.Workload(s.bundle.Bundle, s.cluster.Spec.ControlPlane.Endpoint)
	}
	return s.r.kubes.Get(s.cluster.UID, s.cluster.Spec.ControlPlane.Endpoint, s.bundle.Bundle, s.r.Now(), s.r.Options.CredentialTTL, s.bundle.KubernetesAccepted...)
}

// withAccess calls f; when the controller's identity is not authorized for
// it in the managed cluster (roles set up by an older Ichor), it installs
// the controller's access and calls f again.
func (s *step) withAccess(ctx context.Context, f func() error) error {
	err := f()
	if !apierrors.IsForbidden(err) {
		return err
	}
	if err := workload.InstallControllerAccess(ctx, s.bundle.Bundle, s.cluster.Spec.ControlPlane.Endpoint, s.r.Now(), s.bundle.KubernetesAccepted...); err != nil {
		return fmt.Errorf("install ichor-controller's access to the cluster's Kubernetes: %w", err)
	}
	return f()
}

// drain cordons the step's Node and evicts its pods, as `talosctl upgrade
// --drain` and `kubectl drain --ignore-daemonsets` do, before the node is
// taken away. Until every pod has left it returns a waitError; the step
// holds the budget meanwhile (the node is being taken away).
func (s *step) drain(ctx context.Context) error {
	node := s.m.Status.NodeName
	if node == "" {
		return nil
	}
	cs, err := s.kube()
	if err != nil {
		return err
	}
	var left []string
	err = s.withAccess(ctx, func() error {
		if err := workload.Cordon(ctx, cs, node, owner(s.x.op)); err != nil {
			return err
		}
		left, err = workload.Drain(ctx, cs, node)
		return err
	})
	if err != nil {
		return fmt.Errorf("cordon and drain Node %s through the cluster's Kubernetes API: %w", node, err)
	}
	if len(left) > 0 {
		return &waitError{reason: v1alpha1.OperationReasonDraining,
			msg: fmt.Sprintf("draining Node %s: %d pods still on it (%s)", node, len(left), strings.Join(left, ", "))}
	}
	return nil
}

// nodeBack waits, after a node's reboot, for its Node to be Ready with a
// report from after the reboot, then uncordons it if this operation
// cordoned it. It reports whether the step may end.
func (s *step) nodeBack(ctx context.Context) (bool, ctrl.Result, error) {
	node := s.m.Status.NodeName
	if node == "" {
		return true, ctrl.Result{}, nil
	}
	cs, err := s.kube()
	if err != nil {
		return false, ctrl.Result{}, err
	}
	since := s.record().StartedAt.Time
	var ready bool
	var why string
	err = s.withAccess(ctx, func() (err error) {
		ready, why, err = workload.NodeReadySince(ctx, cs, node, since)
		return err
	})
	if err == nil && !ready {
		if s.timedOut() {
			res, err := s.failed(ctx, "the node runs again, but its Node %s is not Ready after %s: %s", node, s.r.Options.StepTimeout, why)
			return false, res, err
		}
		res, err := s.wait("the node runs again; waiting for its Node %s: %s", node, why)
		return false, res, err
	}
	if err == nil {
		err = s.withAccess(ctx, func() error { return workload.Uncordon(ctx, cs, node, owner(s.x.op)) })
	}
	if err != nil {
		res, err := s.wait("the node runs again; its Node %s cannot be read or uncordoned yet: %v", node, err)
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

// asWait reports a waitError's reason and message.
func asWait(err error) (*waitError, bool) {
	var w *waitError
	return w, errors.As(err, &w)
}
