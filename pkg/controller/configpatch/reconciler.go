// Package configpatch reports on TalosConfigPatches: whether each renders
// into its target machines' configs, the effect class of the change it
// makes to them, and on which of them a config including its current
// generation is applied. It never changes a node; machineconfig does.
package configpatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/installation"
	"ichor.dev/ichor/pkg/predicates"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/statusapply"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "talosconfigpatch-status"

// retryInterval paces a patch waiting for its cluster or bundle.
const retryInterval = 30 * time.Second

// Reconciler writes TalosConfigPatch status.
type Reconciler struct {
	Client  client.Client
	Secrets client.Reader
	// InstallImage must be machineconfig's, so that both render the same bytes.
	InstallImage string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler. It wakes on a patch's spec, on
// any change of a machine of the patch's cluster (a rollout step) and on the
// cluster's spec.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosConfigPatch{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueuePatches(r.Client), builder.WithPredicates(predicates.NotOnlyServingCertificateRecorded)).
		Watches(&v1alpha1.TalosCluster{}, clusterindex.EnqueuePatches(r.Client), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile recomputes one patch's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p v1alpha1.TalosConfigPatch
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := p.Status.DeepCopy()
	now := metav1.NewTime(r.Now())
	set := func(condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
			ObservedGeneration: p.Generation, LastTransitionTime: now,
		})
	}

	result, err := r.evaluate(ctx, &p, set)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.ObservedGeneration = p.Generation
	if !equality.Semantic.DeepEqual(before, &p.Status) {
		if err := writeStatus(ctx, r.Client, &p); err != nil {
			return ctrl.Result{}, err
		}
	}
	return result, nil
}

// FieldManager owns the status fields this reconciler writes: all but the
// override an admin grants through talosconfigpatches/override.
const FieldManager = v1alpha1.FieldManagerConfigPatch

// writeStatus applies p's observed generation, conditions, effect and
// applied machines with server-side apply under FieldManager.
func writeStatus(ctx context.Context, c client.Client, p *v1alpha1.TalosConfigPatch) error {
	st := ichorac.TalosConfigPatchStatus().WithObservedGeneration(p.Status.ObservedGeneration).
		WithConditions(statusapply.Conditions(p.Status.Conditions, v1alpha1.OwnedConditions(p, FieldManager)...)...).
		WithAppliedMachines(p.Status.AppliedMachines...)
	if p.Status.Effect != "" {
		st.WithEffect(p.Status.Effect)
	}
	obj := ichorac.TalosConfigPatch(p.Name, p.Namespace).WithStatus(st)
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosConfigPatch %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

type setFunc func(condType string, status metav1.ConditionStatus, reason, format string, args ...any)

// evaluate renders every targeted machine with and without the patch.
func (r *Reconciler) evaluate(ctx context.Context, p *v1alpha1.TalosConfigPatch, set setFunc) (ctrl.Result, error) {
	p.Status.Effect, p.Status.AppliedMachines = v1alpha1.ConfigEffectNone, nil
	if p.Spec.Disabled {
		set(v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonDisabled, "the patch is disabled and not rendered")
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonDisabled, "the patch is disabled")
		return ctrl.Result{}, nil
	}
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.ClusterName}, &cluster); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonClusterNotFound, "TalosCluster %s does not exist", p.Spec.ClusterName)
		return ctrl.Result{RequeueAfter: retryInterval}, nil
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonSecretsNotReady, "%v", err)
		return ctrl.Result{RequeueAfter: retryInterval}, nil
	}
	settings, err := installation.Settings(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	var machines v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &machines, clusterindex.InCluster(p.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, err
	}
	var patches v1alpha1.TalosConfigPatchList
	if err := r.Client.List(ctx, &patches, clusterindex.InCluster(p.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, err
	}
	// The patch as it is now: the cache may lag behind the object being reconciled.
	others := slices.DeleteFunc(slices.Clone(patches.Items), func(o v1alpha1.TalosConfigPatch) bool { return o.Name == p.Name })
	with := append(slices.Clone(others), *p)

	slices.SortFunc(machines.Items, func(a, b v1alpha1.TalosMachine) int { return cmp.Compare(a.Name, b.Name) })
	var targeted, pending, blocked, needsReset []string
	var resetWhy string
	for i := range machines.Items {
		m := &machines.Items[i]
		if !clusterindex.Member(m) {
			continue
		}
		ok, err := render.Targets(p, m)
		if err != nil {
			set(v1alpha1.PatchConditionValid, metav1.ConditionFalse, string(render.PatchInvalidTarget), "%v", err)
			set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the patch is not valid")
			return ctrl.Result{}, nil
		}
		if !ok {
			continue
		}
		targeted = append(targeted, m.Name)
		withPatch, err := r.render(&cluster, m, with, bundle, settings.ImageFactory)
		var pe *render.PatchError
		if errors.As(err, &pe) && pe.Patch.Name == p.Name {
			set(v1alpha1.PatchConditionValid, metav1.ConditionFalse, string(pe.Reason), "machine %s: %v", m.Name, err)
			set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the patch does not render; no machine gets it")
			return ctrl.Result{}, nil
		}
		if err != nil {
			blocked = append(blocked, fmt.Sprintf("%s (%v)", m.Name, err))
			continue
		}
		applied := m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash == withPatch.Hash
		if without, err := r.render(&cluster, m, others, bundle, settings.ImageFactory); err == nil {
			effect, _, err := render.Classify(without.Config, withPatch.Config, render.ApplyModelOf(cmp.Or(m.Status.TalosVersion, render.ClusterVersion(&cluster))))
			var reset *render.ResetRequiredError
			switch {
			case errors.As(err, &reset) && m.Status.AppliedConfig != nil && !applied:
				// Installed without it: only a node-reset gives it the patch.
				needsReset = append(needsReset, m.Name)
				resetWhy = reset.Error()
				continue
			case err == nil:
				p.Status.Effect = render.Strongest(p.Status.Effect, effect)
			}
		}
		if applied {
			p.Status.AppliedMachines = append(p.Status.AppliedMachines, m.Name)
		} else {
			pending = append(pending, m.Name)
		}
	}
	set(v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders, "the patch renders into the configs of %d targeted machines", len(targeted))
	switch {
	case len(targeted) == 0:
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonNoTargets, "no approved machine of cluster %s is targeted", cluster.Name)
	case len(blocked) > 0:
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonBlocked, "the configs of these machines do not render: %s", strings.Join(blocked, "; "))
	case len(needsReset) > 0:
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonResetRequired, "installed machines %s take it only after a node-reset: %s",
			strings.Join(needsReset, ", "), resetWhy)
	case len(pending) > 0:
		set(v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonRollingOut, "applied on %d of %d machines; waiting for %s",
			len(p.Status.AppliedMachines), len(targeted), strings.Join(pending, ", "))
	default:
		set(v1alpha1.PatchConditionApplied, metav1.ConditionTrue, v1alpha1.PatchReasonAllApplied, "applied on all %d targeted machines", len(targeted))
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) render(cluster *v1alpha1.TalosCluster, m *v1alpha1.TalosMachine, patches []v1alpha1.TalosConfigPatch, bundle *secretsbundle.Secrets,
	factory *v1alpha1.ImageFactory) (render.Rendered, error) {
	return render.Render(render.Input{Cluster: cluster, Machine: m, Patches: patches, Secrets: bundle.Bundle,
		TalosAcceptedCAs: bundle.TalosAccepted, KubernetesAcceptedCAs: bundle.KubernetesAccepted, InstallImage: r.InstallImage,
		ServiceAccountAcceptedKeys: bundle.ServiceAccountAccepted, EncryptionKeys: bundle.EncryptionKeys,
		ImageFactory: factory})
}
