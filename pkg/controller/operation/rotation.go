package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
)

// What the rotations (ca-rotation, key-rotation of the disk key or of
// Kubernetes keys) share: a rotation a cluster records belongs to one
// operation until it ends, and a Secret in the place of a rotation's own is
// refused, never used nor deleted.

// rotatingElsewhere reports whether TalosOperation name, which a cluster
// records as rotating it, still runs: a rotation whose operation failed,
// succeeded or is gone is taken over by the next one.
func (r *Reconciler) rotatingElsewhere(ctx context.Context, op *v1alpha1.TalosOperation, name string) (bool, error) {
	if name == op.Name {
		return false, nil
	}
	var other v1alpha1.TalosOperation
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: name}, &other)
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	return err == nil && other.Status.Phase != v1alpha1.OperationFailed && other.Status.Phase != v1alpha1.OperationSucceeded, nil
}

// refusedOnCluster records a Warning Event on cluster when err is a
// bundlestore.Refusal (a Secret that is not the rotation's), and returns err.
func (r *Reconciler) refusedOnCluster(cluster *v1alpha1.TalosCluster, op *v1alpha1.TalosOperation, action string, err error) error {
	var refusal *bundlestore.Refusal
	if errors.As(err, &refusal) {
		events.Record(r.Recorder, cluster, op, v1alpha1.EventReason(refusal.Reason), action, "%s", refusal.Message)
	}
	return err
}

// failOnRefusal fails the step when err is a bundlestore.Refusal, and
// returns any other error as it is.
func (s *step) failOnRefusal(ctx context.Context, err error) (ctrl.Result, error) {
	var refusal *bundlestore.Refusal
	if errors.As(err, &refusal) {
		return s.failed(ctx, "%s", refusal.Message)
	}
	return ctrl.Result{}, err
}

// leaveRefused is err, but nil for a Refusal to delete a Secret in the
// place of a rotation's, which is logged: it is not the rotation's to
// delete, and the rotation has ended.
func leaveRefused(ctx context.Context, err error) error {
	var refusal *bundlestore.Refusal
	if errors.As(err, &refusal) {
		log.FromContext(ctx).Info("Left a Secret in the place of the rotation's", "reason", refusal.Reason, "message", refusal.Message)
		return nil
	}
	return err
}

// threePhases is a rotation that moves through the three phases of Talos's
// CA rotation (status.caRotation, status.kubernetesKeyRotation) and keeps
// its new material (T: the CAs, the keys) in a Secret of its own from its
// first phase to its end.
type threePhases[T any] struct {
	// rotation and material name them for people: "CA rotation", "CAs".
	rotation, material string
	secretName         func(*v1alpha1.TalosCluster) string
	// recorded is the rotation the cluster records, if any.
	recorded func(*v1alpha1.TalosCluster) (operation string, phase v1alpha1.CARotationPhase, digest string, ok bool)
	// load reads the material of the rotation's Secret; ok is false when
	// there is none.
	load func(context.Context, *v1alpha1.TalosCluster) (v T, ok bool, _ error)
	// remove deletes what an ended rotation left in the Secret's place.
	remove   func(context.Context, *v1alpha1.TalosCluster) error
	generate func(context.Context, *v1alpha1.TalosCluster) (T, error)
	digestOf func(T) string
	store    func(context.Context, *v1alpha1.TalosCluster, T) error
	// record writes phase and digest into the cluster's status, for op,
	// and records the Event.
	record func(ctx context.Context, cluster *v1alpha1.TalosCluster, op *v1alpha1.TalosOperation, phase v1alpha1.CARotationPhase, digest string) error
}

// enter records phase as cluster's, for x's operation, unless the cluster is
// there or further already: a rotation never moves back. The material is
// that of the rotation's Secret when it holds what the cluster records (a
// rotation taken over keeps it), or, entering the first phase without it,
// new material, whose digest is recorded before its Secret is written.
// Stopped in between, the rotation is in its first phase without its
// Secret, and the next step generates other material. A Secret that is not
// the rotation's is refused (a bundlestore.Refusal), and left as it is.
func (p threePhases[T]) enter(ctx context.Context, x *run, cluster *v1alpha1.TalosCluster, phase v1alpha1.CARotationPhase) error {
	op, cur, digest, rotating := p.recorded(cluster)
	if rotating && slices.Index(v1alpha1.CARotationPhases, cur) > slices.Index(v1alpha1.CARotationPhases, phase) {
		phase = cur // taken over where it is
	}
	var (
		next  T
		found bool
	)
	if !rotating {
		// Nothing may stand in the material's place but what an ended
		// rotation left.
		if err := p.remove(ctx, cluster); err != nil {
			return err
		}
	} else {
		var err error
		if next, found, err = p.load(ctx, cluster); err != nil {
			return err
		}
	}
	fresh := !found
	if fresh {
		if phase != v1alpha1.CARotationAcceptNew {
			return fmt.Errorf("TalosCluster %s is in phase %s of a %s, but Secret %s with the new %s is gone: "+
				"recreate it from a copy, or restore the %s by hand", cluster.Name, phase, p.rotation, p.secretName(cluster), p.material, p.material)
		}
		var err error
		if next, err = p.generate(ctx, cluster); err != nil {
			return err
		}
	}
	if rotating && op == x.op.Name && cur == phase && digest == p.digestOf(next) {
		return nil // there already
	}
	if err := p.record(ctx, cluster, x.op, phase, p.digestOf(next)); err != nil {
		return fmt.Errorf("move TalosCluster %s into phase %s of its %s: %w", cluster.Name, phase, p.rotation, err)
	}
	// The secrets in force changed: read them again.
	x.cluster, x.bundle = nil, nil
	if fresh {
		return p.store(ctx, cluster, next)
	}
	return nil
}
